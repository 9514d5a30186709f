/** Global queue limits across real processes: concurrency, rate, and a SIGKILLed worker's slots. */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { exited, forkScript, killedAfterTest, sent } from './support/processes.js';

const t = useTestDatabase();

beforeEach(async () => {
  // Job ids start again in each test's schema: each test gets a starts table of its own.
  await t.query('DROP TABLE IF EXISTS starts');
  await t.query(
    'CREATE TABLE starts (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL, started_at timestamptz NOT NULL)',
  );
});

/** A worker process (processes/limits-worker-process.ts), killed after the test whatever happened. */
async function workerProcess(
  queue: string,
  options: Record<string, unknown>,
  delayMs: number,
  url = t.db.url,
) {
  const child = killedAfterTest(
    t,
    forkScript('../processes/limits-worker-process.ts', {
      SKIPLOCK_URL: url,
      SKIPLOCK_SCHEMA: t.schema,
      HANDLER_DELAY_MS: String(delayMs),
      WORKER_OPTIONS: JSON.stringify({ queues: [queue], pollIntervalMs: 200, ...options }),
    }),
  );
  await sent(child, 'ready');
  return child;
}

/** Counts the queue's running rows every 10 ms on a connection of its own; `stop()` returns the largest count seen. */
function sampleRunning(queue: string): { stop(): Promise<{ max: number; samples: number }> } {
  let stopped = false;
  const jobs = t.jobs;
  const done = (async () => {
    const client = await t.db.pool.connect();
    let max = 0;
    let samples = 0;
    try {
      while (!stopped) {
        const { rows } = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${jobs} WHERE queue = $1 AND status = 'running'`,
          [queue],
        );
        max = Math.max(max, rows[0]!.n);
        samples++;
        await sleep(10);
      }
    } finally {
      client.release();
    }
    return { max, samples };
  })();
  t.defer(async () => {
    stopped = true;
    await done;
  });
  return {
    stop: async () => {
      stopped = true;
      return done;
    },
  };
}

async function stopAll(children: ChildProcess[]): Promise<void> {
  for (const child of children) child.kill('SIGTERM');
  expect(await Promise.all(children.map(exited))).toEqual(children.map(() => 'SIGTERM'));
}

describe('queue limits across processes', () => {
  it('four processes of concurrency 20 never run more than 3 jobs of a queue limited to 3', async () => {
    await t.skiplock.setQueueLimits('capped', { concurrency: 3 });
    // Two of them default to REPEATABLE READ: the limited claim pins READ COMMITTED for itself.
    const repeatableRead = `${t.db.url}?options=${encodeURIComponent('-c default_transaction_isolation=repeatable\\ read')}`;
    const workers = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        workerProcess('capped', { concurrency: 20 }, 20, i < 2 ? t.db.url : repeatableRead),
      ),
    );
    const sampler = sampleRunning('capped');
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ kind: 'work', payload: { i }, queue: 'capped' })),
    );
    await waitFor(
      async () => (await t.jobCount()) === 0,
      60_000,
      'the queue to drain',
      () => t.query(`SELECT status, count(*)::int AS n FROM ${t.jobs} GROUP BY 1`),
    );
    const { max, samples } = await sampler.stop();
    await stopAll(workers);
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
    const workers = await Promise.all(
      Array.from({ length: 2 }, () => workerProcess('paced', { concurrency: 20 }, 5)),
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
    await stopAll(workers);
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
    const sampler = sampleRunning('crash');
    // Its handlers never finish: it holds both slots when it dies. Its leases have a short visibility
    // timeout, and it does not sweep them itself.
    const victim = await workerProcess(
      'crash',
      { concurrency: 5, visibilityTimeoutMs: 1500, sweepIntervalMs: 600_000 },
      600_000,
    );
    await waitFor(
      async () =>
        (await t.jobCount("status = 'running'")) === 2 && (await t.query('SELECT FROM starts')).length === 2,
      20_000,
      'the victim to start a job in both slots',
    );
    victim.kill('SIGKILL');
    expect(await exited(victim)).toBe('SIGKILL');
    const held = await t.query<{ id: string }>(`SELECT id FROM ${t.jobs} WHERE status = 'running'`);
    expect(held).toHaveLength(2);
    const survivor = await workerProcess('crash', { concurrency: 5, sweepIntervalMs: 200 }, 20);
    await waitFor(
      async () => (await t.jobCount()) === 0,
      30_000,
      'the queue to drain after the crash',
      () => t.query(`SELECT status, attempts, count(*)::int AS n FROM ${t.jobs} GROUP BY 1, 2`),
    );
    const { max } = await sampler.stop();
    await stopAll([survivor]);
    expect(max).toBe(2);
    const [all] = await t.query(
      'SELECT count(DISTINCT job_id)::int AS distinct_jobs FROM starts WHERE job_id = ANY($1::bigint[])',
      [jobs.map((j) => j.id)],
    );
    expect(all).toEqual({ distinct_jobs: 10 });
    // The killed worker's jobs ran again, as attempt 2.
    const again = await t.query(
      'SELECT attempts, count(*)::int AS n FROM starts WHERE job_id = ANY($1::bigint[]) GROUP BY 1 ORDER BY 1',
      [held.map((r) => r.id)],
    );
    expect(again).toEqual([
      { attempts: 1, n: 2 },
      { attempts: 2, n: 2 },
    ]);
  }, 90_000);
});
