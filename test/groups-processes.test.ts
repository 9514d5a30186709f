/** Group limits across real processes: one job of a key at a time, and a SIGKILLed worker's group slots. */
import { beforeEach, describe, expect, it } from 'vitest';
import { useTestDatabase } from './support/fixture.js';
import { drainAfterKill, limitWorkers, stopAll, waitUntilDrained } from './support/limit-workers.js';

const t = useTestDatabase();

beforeEach(async () => {
  await t.query('DROP TABLE IF EXISTS runs');
  await t.query(
    `CREATE TABLE runs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id bigint NOT NULL,
       attempts int NOT NULL, group_key text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`,
  );
});

const workers = limitWorkers(t, 'group');

/** Pairs of finished runs of one key whose times overlap. */
async function overlaps(): Promise<number> {
  const [row] = await t.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM runs a JOIN runs b
       ON a.group_key = b.group_key AND a.id < b.id
      AND a.started_at < b.ended_at AND b.started_at < a.ended_at`,
  );
  return row!.n;
}

function keyedJobs(queue: string, keys: number, perKey: number) {
  return Array.from({ length: keys * perKey }, (_, i) => {
    const key = `k${i % keys}`;
    return { kind: 'work', payload: { key }, queue, groupKey: key };
  });
}

describe('group limits across processes', () => {
  it('four processes of concurrency 8 never run two jobs of one key at once with groupConcurrency 1', async () => {
    await t.skiplock.setQueueLimits('keyed', { groupConcurrency: 1 });
    const processes = await Promise.all(
      Array.from({ length: 4 }, () => workers.start('keyed', { concurrency: 8 }, 15)),
    );
    const sampler = workers.sample('keyed');
    const jobs = await t.skiplock.enqueueMany(keyedJobs('keyed', 6, 20));
    await waitUntilDrained(t, 90_000, 'the queue to drain');
    const { max, samples } = await sampler.stop();
    await stopAll(processes);
    expect(samples).toBeGreaterThan(20);
    expect(max).toBe(1);
    expect(await overlaps()).toBe(0);
    const [stats] = await t.query(
      `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs, count(ended_at)::int AS ended
       FROM runs WHERE job_id = ANY($1::bigint[])`,
      [jobs.map((j) => j.id)],
    );
    expect(stats).toEqual({ runs: 120, distinct_jobs: 120, ended: 120 });
    // More than one process ran jobs: the limit held across them, not by chance in one.
    const [spread] = await t.query<{ keys: number }>(
      'SELECT count(DISTINCT group_key)::int AS keys FROM runs',
    );
    expect(spread).toEqual({ keys: 6 });
  }, 150_000);

  it("a SIGKILLed worker's group slots come back once the sweeper reclaims its jobs", async () => {
    await t.skiplock.setQueueLimits('crash', { groupConcurrency: 1 });
    const jobs = await t.skiplock.enqueueMany(keyedJobs('crash', 2, 5));
    // The victim holds both keys' slots when it dies.
    const { held, max } = await drainAfterKill(t, workers, 'crash');
    expect(max).toBe(1);
    expect(await overlaps()).toBe(0);
    expect(await workers.distinctJobsRun(jobs.map((j) => j.id))).toBe(10);
    expect(await workers.runsByAttempt(held)).toEqual([
      { attempts: 1, n: 2 },
      { attempts: 2, n: 2 },
    ]);
  }, 90_000);
});
