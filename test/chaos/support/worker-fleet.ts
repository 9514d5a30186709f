/**
 * Worker processes as an orchestrator keeps them: a number of them, and a
 * replacement started for each one the test kills.
 */

import { type Owner, spawnWorker, type WorkerProcess } from './cluster.js';
import type { WorkerProcessConfig } from './protocol.js';

export class WorkerFleet {
  /** Every process started, killed ones included. */
  readonly spawned: WorkerProcess[] = [];
  /** The processes the test has not killed. */
  readonly alive: WorkerProcess[] = [];

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
    this.spawn();
  }
}

function randomOf<T>(items: T[]): T {
  const item = items[Math.floor(Math.random() * items.length)];
  if (item === undefined) throw new Error('no process to pick from');
  return item;
}
