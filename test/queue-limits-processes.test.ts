/** Global queue limits across real processes: concurrency, rate, and a SIGKILLed worker's slots. */
import { beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { drainAfterKill, limitWorkers, stopAll, waitUntilDrained } from './support/limit-workers.js';

const t = useTestDatabase();

beforeEach(async () => {
  // Job ids start again in each test's schema: each test gets a starts table of its own.
  await t.query('DROP TABLE IF EXISTS starts');
  await t.query(
    'CREATE TABLE starts (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL, started_at timestamptz NOT NULL)',
  );
});

const workers = limitWorkers(t, 'queue');

describe('queue limits across processes', () => {
  it('four processes of concurrency 20 never run more than 3 jobs of a queue limited to 3', async () => {
    await t.skiplock.setQueueLimits('capped', { concurrency: 3 });
    // Two of them default to REPEATABLE READ: the limited claim pins READ COMMITTED for itself.
    const repeatableRead = `${t.db.url}?options=${encodeURIComponent('-c default_transaction_isolation=repeatable\\ read')}`;
    const processes = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        workers.start('capped', { concurrency: 20 }, 20, i < 2 ? t.db.url : repeatableRead),
      ),
    );
    const sampler = workers.sample('capped');
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ kind: 'work', payload: { i }, queue: 'capped' })),
    );
    await waitUntilDrained(t, 60_000, 'the queue to drain');
    const { max, samples } = await sampler.stop();
    await stopAll(processes);
    expect(samples).toBeGreaterThan(20);
    expect(max).toBe(3);
    const [stats] = await t.query(
      'SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs FROM starts WHERE job_id = ANY($1::bigint[])',
      [jobs.map((j) => j.id)],
    );
    expect(stats).toEqual({ runs: 200, distinct_jobs: 200 });
  }, 120_000);

  it('a rate of 50 per second starts 500 ± 50 jobs in 10 s across two processes', async () => {
    await t.skiplock.setQueueLimits('paced', { rate: { count: 50, periodMs: 1000 } });
    const processes = await Promise.all(
      Array.from({ length: 2 }, () => workers.start('paced', { concurrency: 20 }, 5)),
    );
    await t.skiplock.enqueueMany(
      Array.from({ length: 700 }, (_, i) => ({ kind: 'work', payload: { i }, queue: 'paced' })),
    );
    const first = await waitFor(
      async () => (await t.query<{ at: Date | null }>('SELECT min(started_at) AS at FROM starts'))[0]!.at,
      20_000,
      'the first start',
    );
    const windowEnd = first.getTime() + 10_000;
    // Wait out the window (plus time for the last starts' rows to be written).
    await waitFor(() => Date.now() > windowEnd + 500, 15_000, 'the 10 s window to pass');
    const [counted] = await t.query<{ n: number; pids: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT pid)::int AS pids FROM starts
       WHERE started_at >= $1 AND started_at < $1::timestamptz + interval '10 seconds'`,
      [first],
    );
    await stopAll(processes);
    expect(counted!.pids).toBe(2);
    expect(counted!.n).toBeGreaterThanOrEqual(450);
    expect(counted!.n).toBeLessThanOrEqual(550);
    // Worker processes start slowly on a loaded machine; the window itself is measured by the database.
  }, 120_000);

  it("a SIGKILLed worker's slots come back once the sweeper reclaims its jobs", async () => {
    await t.skiplock.setQueueLimits('crash', { concurrency: 2 });
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 10 }, (_, i) => ({ kind: 'work', payload: { i }, queue: 'crash' })),
    );
    // The victim holds both slots when it dies.
    const { held, max } = await drainAfterKill(t, workers, 'crash');
    expect(max).toBe(2);
    expect(await workers.distinctJobsRun(jobs.map((j) => j.id))).toBe(10);
    // The killed worker's jobs ran again, as attempt 2.
    expect(await workers.runsByAttempt(held)).toEqual([
      { attempts: 1, n: 2 },
      { attempts: 2, n: 2 },
    ]);
  }, 90_000);
});
