/**
 * The ceiling: skiplock's own claim and complete statements (loaded from the
 * engine, not copied) run in a bare loop through `pg` (no handlers, no events,
 * no batching of results). Also the one-statement variant (DELETE … SKIP
 * LOCKED … RETURNING), the least work any SKIP LOCKED queue can do per job,
 * in the loop and under `pgbench`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { adminQuery, createDatabase, dropDatabase, withDatabase } from '../database.js';
import { loadEngine, loadStatements } from './skiplock.js';

const run = promisify(execFile);

/** The two statements of skiplock's cycle (claim, then delete under the lease), and the one-statement variant. */
export type Cycle = 'claim+delete' | 'delete';

/** The kinds of the claim: the benchmark's one kind. */
export const KINDS = ['noop'];

/** skiplock's own statements in the default schema, as its worker sends them. */
export async function engineStatements() {
  const { JobQueries } = await loadStatements();
  return new JobQueries('skiplock');
}

/**
 * One turn of skiplock's cycle on `client`: its claim (named, as the worker
 * sends it) of up to `batch` jobs, then its fenced complete statement for
 * `onSuccess: 'delete'` (unnamed, as the worker sends it); `onJob` sees each
 * claimed job's payload in between. Returns the jobs done.
 */
export async function claimAndComplete(
  queries: Awaited<ReturnType<typeof engineStatements>>,
  client: pg.ClientBase,
  batch: number,
  workerId: string,
  onJob?: (payload: unknown) => void,
): Promise<number> {
  const claimed = await queries.claim.claim(client, {
    queues: ['default'],
    kinds: KINDS,
    limit: batch,
    workerId,
    visibilityTimeoutMs: 300_000,
  });
  if (claimed.length === 0) return 0;
  if (onJob) for (const job of claimed) onJob(job.payload);
  const succeeded = claimed.map((j) => ({ ...j, outcome: 'succeeded' as const }));
  return (await queries.finish.finish(client, succeeded, workerId, 'delete')).size;
}

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
 * nothing left. `asyncCommit` runs the loops with the session settings of
 * skiplock's worker pool (`synchronous_commit = off`).
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
  const queries = await engineStatements();
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
            const n = await claimAndComplete(queries, client, batch, workerId);
            if (n === 0) return;
            done += n;
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
 * Drains the prefilled jobs table with `pgbench` running the one-statement
 * cycle (DELETE … SKIP LOCKED, `clients` connections, prepared statements,
 * `jobs / clients / batch` transactions each); returns jobs/s, from the rows
 * deleted and pgbench's time without connection setup.
 */
export async function pgbenchDrain(
  url: string,
  batch: number,
  clients: number,
  jobs: number,
): Promise<number> {
  const script = `${CLAIM_DELETE.replace('$1', "'default'").replace('$2', String(batch)).replace(/\n/g, ' ')};\n`;
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
