/**
 * The driver of the limit tests across real processes: worker processes whose
 * one handler, `work`, records each run in a table of the test's schema, a
 * sampler of the running jobs, and the crash scenario that queue limits and
 * group limits share (a SIGKILLed worker's slots come back through the sweeper).
 */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import { waitFor } from './database.js';
import type { TestContext } from './fixture.js';
import { exited, forkScript, killedAfterTest, sent } from './processes.js';

/**
 * Which limit the processes test. `queue`: processes/limits-worker-process.ts,
 * runs recorded in `starts`, the sampler counts a queue's running jobs. `group`:
 * processes/groups-worker-process.ts, runs recorded in `runs`, the sampler
 * counts the running jobs of the queue's busiest group key.
 */
export type LimitKind = 'queue' | 'group';

const SCRIPTS: Record<LimitKind, { script: string; runs: string }> = {
  queue: { script: '../processes/limits-worker-process.ts', runs: 'starts' },
  group: { script: '../processes/groups-worker-process.ts', runs: 'runs' },
};

/** The running jobs of a queue, and those of its busiest group key. */
function runningSql(kind: LimitKind, jobs: string): string {
  return kind === 'queue'
    ? `SELECT count(*)::int AS n FROM ${jobs} WHERE queue = $1 AND status = 'running'`
    : `SELECT COALESCE(max(n), 0)::int AS n FROM (
         SELECT count(*) AS n FROM ${jobs} WHERE queue = $1 AND status = 'running' GROUP BY group_key) c`;
}

/** What a limit test across processes works with. */
export interface LimitWorkers {
  /** The table the handlers record their runs in (`job_id`, `attempts`, …), in the test's schema. */
  runs: string;
  /**
   * Starts a worker process on `queue` (poll every 200 ms, then `options`)
   * whose handler takes `delayMs` after recording its run, connected to `url`
   * (the test's database by default); SIGKILLed after the test whatever
   * happened. Resolves once it runs.
   */
  start(
    queue: string,
    options: Record<string, unknown>,
    delayMs: number,
    url?: string,
  ): Promise<ChildProcess>;
  /**
   * Counts the running jobs of `queue` (of its busiest key, for `group`) every
   * 10 ms on a connection of its own; `stop()` resolves with the largest count
   * seen and how many samples it took.
   */
  sample(queue: string): { stop(): Promise<{ max: number; samples: number }> };
  /** How many of the jobs `ids` ran at least once. */
  distinctJobsRun(ids: string[]): Promise<number>;
  /** The runs of the jobs `ids` per attempt number, by attempt. */
  runsByAttempt(ids: string[]): Promise<{ attempts: number; n: number }[]>;
}

/** The processes and sampler of `kind` for the test of `t`. */
export function limitWorkers(t: TestContext, kind: LimitKind): LimitWorkers {
  const { script, runs } = SCRIPTS[kind];
  return {
    runs,
    start: async (queue, options, delayMs, url = t.db.url) => {
      const child = killedAfterTest(
        t,
        forkScript(script, {
          SKIPLOCK_URL: url,
          SKIPLOCK_SCHEMA: t.schema,
          HANDLER_DELAY_MS: String(delayMs),
          WORKER_OPTIONS: JSON.stringify({ queues: [queue], pollIntervalMs: 200, ...options }),
        }),
      );
      await sent(child, 'ready');
      return child;
    },
    sample: (queue) => {
      let stopped = false;
      const sql = runningSql(kind, t.jobs);
      const done = (async () => {
        const client = await t.db.pool.connect();
        let max = 0;
        let samples = 0;
        try {
          while (!stopped) {
            const { rows } = await client.query<{ n: number }>(sql, [queue]);
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
    },
    distinctJobsRun: async (ids) => {
      const [row] = await t.query<{ n: number }>(
        `SELECT count(DISTINCT job_id)::int AS n FROM ${runs} WHERE job_id = ANY($1::bigint[])`,
        [ids],
      );
      return row!.n;
    },
    runsByAttempt: (ids) =>
      t.query<{ attempts: number; n: number }>(
        `SELECT attempts, count(*)::int AS n FROM ${runs} WHERE job_id = ANY($1::bigint[]) GROUP BY 1 ORDER BY 1`,
        [ids],
      ),
  };
}

/** Waits at most `timeoutMs` until the test's schema holds no job (a succeeded job is deleted); a timeout shows the jobs left by status and attempt. */
export async function waitUntilDrained(t: TestContext, timeoutMs: number, what: string): Promise<void> {
  await waitFor(
    async () => (await t.jobCount()) === 0,
    timeoutMs,
    what,
    () => t.query(`SELECT status, attempts, count(*)::int AS n FROM ${t.jobs} GROUP BY 1, 2`),
  );
}

/** SIGTERMs `children` and expects each to exit by that signal (a clean stop). */
export async function stopAll(children: ChildProcess[]): Promise<void> {
  for (const child of children) child.kill('SIGTERM');
  expect(await Promise.all(children.map(exited))).toEqual(children.map(() => 'SIGTERM'));
}

/**
 * The crash scenario on `queue`, whose limit allows two running jobs and which
 * holds enqueued jobs: a victim (concurrency 5, handlers that never finish, a
 * 1.5 s visibility timeout, no sweep of its own) starts two of them and is
 * SIGKILLed; a survivor (concurrency 5, sweeping every 200 ms, 20 ms
 * handlers) then drains the queue. Resolves with the ids of the two jobs the
 * victim held and the most running jobs the sampler saw from before the victim
 * started until the queue was empty.
 */
export async function drainAfterKill(
  t: TestContext,
  workers: LimitWorkers,
  queue: string,
): Promise<{ held: string[]; max: number }> {
  const sampler = workers.sample(queue);
  const victim = await workers.start(
    queue,
    { concurrency: 5, visibilityTimeoutMs: 1500, sweepIntervalMs: 600_000 },
    600_000,
  );
  await waitFor(
    async () =>
      (await t.jobCount("status = 'running'")) === 2 &&
      (await t.query(`SELECT FROM ${workers.runs}`)).length === 2,
    20_000,
    'the victim to start two jobs',
  );
  victim.kill('SIGKILL');
  expect(await exited(victim)).toBe('SIGKILL');
  const held = await t.query<{ id: string }>(`SELECT id FROM ${t.jobs} WHERE status = 'running'`);
  expect(held).toHaveLength(2);
  const survivor = await workers.start(queue, { concurrency: 5, sweepIntervalMs: 200 }, 20);
  await waitUntilDrained(t, 30_000, 'the queue to drain after the crash');
  const { max } = await sampler.stop();
  await stopAll([survivor]);
  return { held: held.map((r) => r.id), max };
}
