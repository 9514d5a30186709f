/**
 * The relay's claim reads one batch from the claim index and publishes it in
 * the order priority DESC, run_at, id, whatever the backlog and however stale
 * the planner's statistics: it never reads and sorts every due job of the
 * queue. The plan is checked, not the timing.
 */
import { describe, expect, it } from 'vitest';
import { RelayQueries } from '../src/db/queries/relay.js';
import { schemaNames } from '../src/db/queries/schema-names.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const BACKLOG = 5_000;
const BATCH = 100;
/** Jobs per enqueue transaction. */
const TX = 100;

/** Runs `fn` on a connection that sends each statement's executed plan back as a notice. */
async function withPlans<T>(
  fn: (client: import('pg').PoolClient) => Promise<T>,
): Promise<{ result: T; plans: string[] }> {
  const client = await t.db.pool.connect();
  const plans: string[] = [];
  const onNotice = (notice: { message?: string | undefined }) => void plans.push(notice.message ?? '');
  client.on('notice', onNotice);
  try {
    await client.query(`LOAD 'auto_explain'`);
    await client.query(
      `SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
       SET auto_explain.log_timing = off; SET auto_explain.log_level = 'notice'`,
    );
    const result = await fn(client);
    return { result, plans };
  } finally {
    client.off('notice', onNotice);
    await client.query('RESET ALL').catch(() => {});
    client.release(true);
  }
}

describe("the relay's claim", () => {
  it(`reads one batch from the claim index with ${BACKLOG.toLocaleString('en-US')} jobs waiting, in publishing order`, async () => {
    // Enqueued by transactions of TX jobs (each of one queue, alternating): jobs of
    // one transaction share their run_at, so only the id orders them.
    const calls: string[][] = [];
    for (let call = 0; call < BACKLOG / TX; call++) {
      const jobs = await t.skiplock.enqueueMany(
        Array.from({ length: TX }, (_, n) => ({
          kind: 'a',
          payload: { call, n },
          queue: call % 2 === 0 ? 'relayed' : 'other',
          priority: call === 1 && n < 10 ? 1 : 0,
        })),
      );
      calls.push(jobs.map((job) => job.id));
    }
    // No ANALYZE: the planner's statistics predate the backlog, as in a table autovacuum has not reached yet.
    const queries = new RelayQueries(schemaNames(t.schema));
    const { result: rows, plans } = await withPlans((client) =>
      queries.claim(client, {
        queues: ['relayed', 'other'],
        limit: BATCH,
        relayId: 'relay:test',
        visibilityTimeoutMs: 60_000,
      }),
    );
    // The ten priority-1 jobs of the second call first, then the first call's by id, then the second's.
    expect(rows.map((row) => row.id)).toEqual([...calls[1]!.slice(0, 10), ...calls[0]!.slice(0, BATCH - 10)]);
    expect(await t.jobCount("status = 'running' AND locked_by = 'relay:test'")).toBe(BATCH);
    const plan =
      plans.find((text) => text.includes('relay') || text.includes('LockRows')) ?? plans.join('\n');
    expect(plan).not.toMatch(/Seq Scan on jobs/);
    // Each queue's index scan stops at the batch (rows is per loop; one loop a queue).
    const scanned = [
      ...plan.matchAll(
        /Index Scan using jobs_claim_idx on jobs .*?\(actual (?:time=\S+ )?rows=([\d.]+) loops=(\d+)\)/g,
      ),
    ].map(([, rows, loops]) => Number(rows) * Number(loops));
    expect(scanned.length).toBeGreaterThan(0);
    for (const n of scanned) expect(n).toBeLessThanOrEqual(2 * BATCH);
    // The removal of the acknowledged batch finds it by primary key.
    const removal = await withPlans((client) =>
      queries.remove(
        client,
        rows.map((row) => row.id),
        'relay:test',
      ),
    );
    expect(removal.result).toHaveLength(BATCH);
    expect(removal.plans.join('\n')).not.toMatch(/Seq Scan on jobs/);
  });

  const claim = (limit: number, relayId = 'relay:test') =>
    new RelayQueries(schemaNames(t.schema)).claim(t.db.pool, {
      queues: ['relayed'],
      limit,
      relayId,
      visibilityTimeoutMs: 60_000,
    });

  it('returns the batch in order to the microsecond of run_at, then by id', async () => {
    const [first, second, third] = await t.skiplock.enqueueMany(
      ['a', 'b', 'c'].map((n) => ({ kind: 'k', payload: { n }, queue: 'relayed', groupKey: 'g' })),
    );
    // Within one millisecond, the later id comes first by run_at.
    await t.query(`UPDATE ${t.jobs} SET run_at = $2 WHERE id = $1`, [
      first!.id,
      '2026-01-01T00:00:00.000800Z',
    ]);
    await t.query(`UPDATE ${t.jobs} SET run_at = $2 WHERE id = $1`, [
      second!.id,
      '2026-01-01T00:00:00.000300Z',
    ]);
    await t.query(`UPDATE ${t.jobs} SET run_at = $2 WHERE id = $1`, [
      third!.id,
      '2026-01-01T00:00:00.000300Z',
    ]);
    expect((await claim(10)).map((row) => row.id)).toEqual([second!.id, third!.id, first!.id]);
  });

  it('passes over a key whose job another relay holds, so that other jobs fill the batch', async () => {
    await t.skiplock.enqueueMany(
      Array.from({ length: 26 }, (_, n) => ({ kind: 'k', payload: { n }, queue: 'relayed', groupKey: 'g' })),
    );
    const loose = await t.skiplock.enqueueMany(
      Array.from({ length: 5 }, (_, n) => ({ kind: 'k', payload: { n }, queue: 'relayed' })),
    );
    const held = await claim(1, 'relay:other');
    expect(held).toHaveLength(1);
    expect(held[0]!.group_key).toBe('g');
    const batch = await claim(10);
    expect(batch.map((row) => row.id)).toEqual(loose.map((job) => job.id));
  });

  it('does not hold a key back behind its job past the start deadline', async () => {
    const expired = await t.skiplock.enqueue('k', { n: 'expired' }, { queue: 'relayed', groupKey: 'g' });
    const next = await t.skiplock.enqueue('k', { n: 'next' }, { queue: 'relayed', groupKey: 'g' });
    await t.query(`UPDATE ${t.jobs} SET start_by = now() - interval '1 second' WHERE id = $1`, [expired.id]);
    expect((await claim(10)).map((row) => row.id)).toEqual([next.id]);
    expect(await t.jobCount("id = $1 AND status = 'queued'", [expired.id])).toBe(1);
  });
});
