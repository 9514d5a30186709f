/** Group limits across real processes: one job of a key at a time, and a SIGKILLed worker's group slots. */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { exited, forkScript, sent } from './support/processes.js';

const t = useTestDatabase();

beforeEach(async () => {
  await t.query('DROP TABLE IF EXISTS runs');
  await t.query(
    `CREATE TABLE runs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id bigint NOT NULL,
       attempts int NOT NULL, group_key text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`,
  );
});

/** A worker process (processes/groups-worker-process.ts), killed after the test whatever happened. */
async function workerProcess(queue: string, options: Record<string, unknown>, delayMs: number) {
  const child = forkScript('../processes/groups-worker-process.ts', {
    SKIPLOCK_URL: t.db.url,
    SKIPLOCK_SCHEMA: t.schema,
    HANDLER_DELAY_MS: String(delayMs),
    WORKER_OPTIONS: JSON.stringify({ queues: [queue], pollIntervalMs: 200, ...options }),
  });
  t.defer(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited(child);
    }
  });
  await sent(child, 'ready');
  return child;
}

/** Counts each key's running rows every 10 ms on a connection of its own; `stop()` returns the largest count of one key seen. */
function sampleRunningPerKey(queue: string): { stop(): Promise<{ max: number; samples: number }> } {
  let stopped = false;
  const jobs = t.jobs;
  const done = (async () => {
    const client = await t.db.pool.connect();
    let max = 0;
    let samples = 0;
    try {
      while (!stopped) {
        const { rows } = await client.query<{ n: number }>(
          `SELECT COALESCE(max(n), 0)::int AS n FROM (
             SELECT count(*) AS n FROM ${jobs} WHERE queue = $1 AND status = 'running' GROUP BY group_key) c`,
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

/** Pairs of finished runs of one key whose times overlap. */
async function overlaps(): Promise<number> {
  const [row] = await t.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM runs a JOIN runs b
       ON a.group_key = b.group_key AND a.id < b.id
      AND a.started_at < b.ended_at AND b.started_at < a.ended_at`,
  );
  return row!.n;
}

async function stopAll(children: ChildProcess[]): Promise<void> {
  for (const child of children) child.kill('SIGTERM');
  expect(await Promise.all(children.map(exited))).toEqual(children.map(() => 'SIGTERM'));
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
    const workers = await Promise.all(
      Array.from({ length: 4 }, () => workerProcess('keyed', { concurrency: 8 }, 15)),
    );
    const sampler = sampleRunningPerKey('keyed');
    const jobs = await t.skiplock.enqueueMany(keyedJobs('keyed', 6, 20));
    await waitFor(
      async () => (await t.jobCount()) === 0,
      90_000,
      'the queue to drain',
      () => t.query(`SELECT status, count(*)::int AS n FROM ${t.jobs} GROUP BY 1`),
    );
    const { max, samples } = await sampler.stop();
    await stopAll(workers);
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
    const sampler = sampleRunningPerKey('crash');
    // Its handlers never finish: it holds both keys' slots when it dies. Its
    // leases have a short visibility timeout, and it does not sweep them itself.
    const victim = await workerProcess(
      'crash',
      { concurrency: 5, visibilityTimeoutMs: 1500, sweepIntervalMs: 600_000 },
      600_000,
    );
    await waitFor(
      async () =>
        (await t.jobCount("status = 'running'")) === 2 && (await t.query('SELECT FROM runs')).length === 2,
      20_000,
      'the victim to start one job of each key',
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
    expect(max).toBe(1);
    expect(await overlaps()).toBe(0);
    const [all] = await t.query(
      'SELECT count(DISTINCT job_id)::int AS distinct_jobs FROM runs WHERE job_id = ANY($1::bigint[])',
      [jobs.map((j) => j.id)],
    );
    expect(all).toEqual({ distinct_jobs: 10 });
    const again = await t.query(
      'SELECT attempts, count(*)::int AS n FROM runs WHERE job_id = ANY($1::bigint[]) GROUP BY 1 ORDER BY 1',
      [held.map((r) => r.id)],
    );
    expect(again).toEqual([
      { attempts: 1, n: 2 },
      { attempts: 2, n: 2 },
    ]);
  }, 90_000);
});
