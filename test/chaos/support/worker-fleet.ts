/**
 * Worker processes as an orchestrator keeps them: a number of them, and a
 * replacement started for each one the test kills.
 */

import { waitFor } from '../../support/database.js';
import type { TestContext } from '../../support/fixture.js';
import { type Owner, spawnWorker, type WorkerProcess, waitUntilSettled, workerConfig } from './cluster.js';
import { enqueueInBatches } from './enqueue-batches.js';
import type { WorkerProcessConfig } from './protocol.js';

export class WorkerFleet {
  /** Every process started, killed ones included. */
  readonly spawned: WorkerProcess[] = [];
  /** The processes the test has not killed. */
  readonly alive: WorkerProcess[] = [];
  /** How many processes the test killed (each one replaced). */
  kills = 0;

  /**
   * @param owner - shuts every process down after the test.
   * @param config - the configuration of each process started.
   */
  constructor(
    private readonly owner: Owner,
    private readonly config: () => WorkerProcessConfig,
  ) {}

  /** Starts one more process (without waiting until it runs). */
  spawn(): WorkerProcess {
    const p = spawnWorker(this.owner, this.config());
    this.spawned.push(p);
    this.alive.push(p);
    return p;
  }

  /** Starts `count` processes and waits until all of them run. */
  async start(count: number): Promise<void> {
    await Promise.all(Array.from({ length: count }, () => this.spawn().ready()));
  }

  /** The processes that run a worker now (started, not killed). */
  busy(): WorkerProcess[] {
    return this.alive.filter((p) => p.alive && p.workerId !== undefined);
  }

  /** SIGKILLs `victim` (by default a random busy process), waits until it exited, and starts its replacement. */
  async killAndReplace(victim = randomOf(this.busy())): Promise<void> {
    victim.kill('SIGKILL');
    await victim.exited;
    this.alive.splice(this.alive.indexOf(victim), 1);
    this.kills++;
    this.spawn();
  }

  /**
   * Kills and replaces a random busy process `count` times, spread evenly over
   * the run: the k-th kill once `progress()` reaches k × `total` / (`count` + 1).
   * Each wait fails after `timeoutMs`, saying how many `unit` it waited for.
   */
  async killAlong(options: {
    count: number;
    total: number;
    progress: () => Promise<number>;
    unit: string;
    timeoutMs: number;
  }): Promise<void> {
    const { count, total, progress, unit, timeoutMs } = options;
    const step = Math.floor(total / (count + 1));
    for (let k = 1; k <= count; k++) {
      await waitFor(async () => (await progress()) >= k * step, timeoutMs, `${k * step} ${unit}`, progress);
      await this.killAndReplace();
    }
  }
}

function randomOf<T>(items: T[]): T {
  const item = items[Math.floor(Math.random() * items.length)];
  if (item === undefined) throw new Error('no process to pick from');
  return item;
}

/** Worker processes of a {@link crashRun} at any time (concurrency 8 each). */
export const CRASH_RUN_WORKERS = 3;
/** Workers a {@link crashRun} SIGKILLs (each replaced), spread evenly over the run. */
export const CRASH_RUN_KILLS = 8;

/** A crash run: the jobs it enqueues, and how it measures progress. */
export interface CrashRun {
  queue: string;
  /** The kind of the jobs (payload `{ n }`, n = 0, 1, …). */
  kind: string;
  /** Jobs enqueued once the workers run. */
  jobs: number;
  /** How far the run is, counted in `unit` (a kill waits at most 60 s for its share). */
  progress(): Promise<number>;
  unit: string;
}

/**
 * Starts {@link CRASH_RUN_WORKERS} workers on the run's queue, enqueues its
 * jobs, kills and replaces {@link CRASH_RUN_KILLS} of them along the way, and
 * waits (at most 90 s) until none of the jobs is queued or running. Resolves
 * with the fleet and the ids of the jobs.
 */
export async function crashRun(
  t: TestContext,
  run: CrashRun,
): Promise<{ fleet: WorkerFleet; ids: string[] }> {
  const fleet = new WorkerFleet(t, () => workerConfig(t, { queues: [run.queue], concurrency: 8 }));
  await fleet.start(CRASH_RUN_WORKERS);
  const ids = await enqueueInBatches(t.skiplock, run.jobs, (n) => ({
    kind: run.kind,
    payload: { n },
    queue: run.queue,
  }));
  // Kill random workers that are running jobs, and start their replacements (as an orchestrator would).
  await fleet.killAlong({
    count: CRASH_RUN_KILLS,
    total: run.jobs,
    progress: run.progress,
    unit: run.unit,
    timeoutMs: 60_000,
  });
  await waitUntilSettled(t.db.pool, t.schema, ids, 90_000);
  return { fleet, ids };
}
