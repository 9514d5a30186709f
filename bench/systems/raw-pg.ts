/**
 * The ceiling: skiplock's own claim and complete statements run in a bare
 * loop through `pg` (no handlers, no events, no batching of results), and the
 * same cycle under `pgbench`. Also the one-statement variant (DELETE … SKIP
 * LOCKED … RETURNING), the least work any SKIP LOCKED queue can do per job.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { adminQuery, createDatabase, dropDatabase, withDatabase } from '../database.js';
import { loadEngine } from './skiplock.js';

const run = promisify(execFile);

/** The two statements of skiplock's cycle (claim, then delete under the lease), and the one-statement variant. */
export type Cycle = 'claim+delete' | 'delete';

/**
 * skiplock's claim statement (src/db/queries/claim.ts, one queue), in the
 * default schema: $1 queue, $2 limit, $3 worker id, $4 visibility timeout,
 * $5 the worker's kinds.
 */
export const CLAIM = `WITH picked AS (
  SELECT id FROM skiplock.jobs
  WHERE status = 'queued' AND queue = $1 AND run_at <= now() AND kind = ANY($5::text[])
  ORDER BY priority DESC, run_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE skiplock.jobs j
SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
    locked_by = $3, visibility_timeout_ms = $4
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
          j.lease_seq, j.created_at`;

/**
 * skiplock's complete statement for `onSuccess: 'delete'` (src/db/queries/results.ts),
 * fenced by the lease: $1 ids, $2 attempts, $3 lease numbers, $4 worker id.
 */
export const COMPLETE = `DELETE FROM skiplock.jobs j
USING unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
WHERE j.id = ANY($1::bigint[]) AND j.id = r.id AND j.attempts = r.attempts
  AND j.lease_seq = r.lease_seq AND j.status = 'running' AND j.locked_by = $4
RETURNING j.id, j.lease_seq`;

/** The kinds parameter ($5) of {@link CLAIM}: the benchmark's one kind. */
export const KINDS = ['noop'];

const CLAIM_DELETE = `WITH picked AS (
  SELECT id FROM skiplock.jobs
  WHERE status = 'queued' AND queue = $1 AND run_at <= now()
  ORDER BY priority DESC, run_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.jobs j USING picked WHERE j.id = picked.id
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts, j.created_at`;

/** Makes a database with skiplock's schema (same table, indexes and trigger as the engine). */
export async function createRawDatabase(serverUrl: string, namespace: string): Promise<string> {
  const url = await createDatabase(serverUrl, namespace);
  const { Skiplock } = await loadEngine();
  const skiplock = new Skiplock({ connectionString: url });
  await skiplock.migrate();
  await skiplock.close();
  return url;
}

/** Drops a database made by {@link createRawDatabase}. */
export function dropRawDatabase(url: string, namespace: string): Promise<void> {
  return dropDatabase(withDatabase(url, 'postgres'), namespace);
}

/** Inserts `jobs` due no-op jobs with one statement, and refreshes the planner's statistics. */
export async function prefill(url: string, jobs: number): Promise<void> {
  await adminQuery(
    url,
    `INSERT INTO skiplock.jobs (kind, payload) SELECT 'noop', jsonb_build_object('i', g) FROM generate_series(1, $1::int) g`,
    [jobs],
  );
  await adminQuery(url, 'VACUUM ANALYZE skiplock.jobs');
}

/**
 * Drains the jobs table with `connections` loops of the bare cycle, each
 * claiming `batch` jobs at a time; returns jobs/s until every loop finds
 * nothing left. `asyncCommit` runs the loops at `synchronous_commit = off`,
 * as skiplock's worker pool does.
 */
export async function rawDrain(
  url: string,
  cycle: Cycle,
  batch: number,
  connections: number,
  asyncCommit = false,
): Promise<number> {
  const clients = await Promise.all(
    Array.from({ length: connections }, async () => {
      const client = new pg.Client({
        connectionString: url,
        ...(asyncCommit ? { options: '-c synchronous_commit=off' } : {}),
      });
      await client.connect();
      return client;
    }),
  );
  let done = 0;
  try {
    const startedAt = performance.now();
    await Promise.all(
      clients.map(async (client, k) => {
        const workerId = `raw-${k}`;
        for (;;) {
          if (cycle === 'delete') {
            const { rowCount } = await client.query({
              name: 'claim_delete',
              text: CLAIM_DELETE,
              values: ['default', batch],
            });
            if (!rowCount) return;
            done += rowCount;
          } else {
            const { rows } = await client.query<{ id: string; attempts: number; lease_seq: string }>({
              name: 'claim',
              text: CLAIM,
              values: ['default', batch, workerId, 300_000, KINDS],
            });
            if (rows.length === 0) return;
            // Unnamed, like skiplock's results: planned with the batch's real size.
            const { rowCount } = await client.query({
              text: COMPLETE,
              values: [
                rows.map((r) => r.id),
                rows.map((r) => r.attempts),
                rows.map((r) => r.lease_seq),
                workerId,
              ],
            });
            done += rowCount ?? 0;
          }
        }
      }),
    );
    return done / ((performance.now() - startedAt) / 1000);
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

/** Whether `pgbench` is on the PATH. */
export async function hasPgbench(): Promise<boolean> {
  try {
    await run('pgbench', ['--version']);
    return true;
  } catch {
    return false;
  }
}

/**
 * Drains the prefilled jobs table with `pgbench` (`clients` connections,
 * prepared statements, `jobs / clients / batch` transactions each); returns
 * jobs/s, from the rows deleted and pgbench's time without connection setup.
 */
export async function pgbenchDrain(
  url: string,
  cycle: Cycle,
  batch: number,
  clients: number,
  jobs: number,
): Promise<number> {
  const script =
    cycle === 'delete'
      ? `${CLAIM_DELETE.replace('$1', "'default'").replace('$2', String(batch)).replace(/\n/g, ' ')};\n`
      : [
          // A batch's ids travel to the second statement as array text (a bind parameter under -M prepared);
          // a data-modifying WITH must be at the top, so the claim becomes one more CTE.
          `${CLAIM.replace('$1', "'default'")
            .replace('$2', String(batch))
            .replace('$3', "'pgbench'")
            .replace('$4', '300000')
            .replace('$5::text[]', "ARRAY['noop']")
            .replace('UPDATE skiplock.jobs j', ', claimed AS (UPDATE skiplock.jobs j')
            .replace(
              /\n/g,
              ' ',
            )}) SELECT coalesce(array_agg(id)::text, '{}') AS ids, coalesce(array_agg(attempts)::text, '{}') AS att, coalesce(array_agg(lease_seq)::text, '{}') AS seq FROM claimed \\gset`,
          `${COMPLETE.replaceAll('$1::bigint[]', ':ids::bigint[]')
            .replace('$2::int[]', ':att::int[]')
            .replace('$3::bigint[]', ':seq::bigint[]')
            .replace('$4', "'pgbench'")
            .replace(/\n/g, ' ')};`,
          '',
        ].join('\n');
  const dir = mkdtempSync(join(tmpdir(), 'skbench-pgbench-'));
  const file = join(dir, 'cycle.sql');
  writeFileSync(file, script);
  const before = await remainingJobs(url);
  const u = new URL(url);
  try {
    const transactions = Math.ceil(jobs / clients / batch);
    const { stdout } = await run(
      'pgbench',
      [
        '-n',
        '-M',
        'prepared',
        '-c',
        String(clients),
        '-j',
        String(Math.min(clients, 2)),
        '-t',
        String(transactions),
        '-f',
        file,
        '-h',
        u.hostname,
        '-p',
        u.port || '5432',
        '-U',
        decodeURIComponent(u.username || 'postgres'),
        u.pathname.slice(1),
      ],
      { env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) } },
    );
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1]);
    const processed = Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1]);
    if (!(tps > 0 && processed > 0)) throw new Error(`pgbench output not understood:\n${stdout}`);
    const deleted = before - (await remainingJobs(url));
    return deleted / (processed / tps);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function remainingJobs(url: string): Promise<number> {
  const [row] = await adminQuery<{ n: number }>(url, 'SELECT count(*)::int AS n FROM skiplock.jobs');
  return row!.n;
}
