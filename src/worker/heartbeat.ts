/**
 * Refreshes `locked_at` of the worker's running jobs so that long handlers keep
 * their lease. A job the heartbeat no longer holds was reclaimed: the
 * worker aborts its handler's signal, and its late result will be fenced out.
 * A held job whose cancel was requested is reported too: the safety net of a
 * cancel message that did not arrive. A row another transaction holds locked
 * (a child's enqueue naming the job as its parent) is skipped by the beat, so
 * that it holds up no other lease, and renewed by a statement of its own that
 * waits for the lock.
 */

import { isTimeout, translateError } from '../db/executor.js';
import { type LeasedJob, leaseKey } from '../db/queries/job-row.js';
import type { HeartbeatResult } from '../db/queries/results.js';
import type { SkiplockError } from '../errors.js';
import type { Clock } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';

/** What the heartbeat needs from its worker. */
export interface HeartbeatDeps<T extends LeasedJob> {
  intervalMs: number;
  leased(): T[];
  beat(jobs: T[]): Promise<HeartbeatResult>;
  /** Renews leases whose rows were locked, waiting for the locks (see {@link HeartbeatResult.locked}). */
  renewLocked(jobs: T[]): Promise<void>;
  onLost(job: T): void;
  /** Held jobs whose cancel was requested (called for each beat that finds them). */
  onCancelRequested(jobs: T[]): void;
  onError(error: SkiplockError): void;
}

/** One beat every `intervalMs` (from the end of the previous one) while the worker runs. */
export class Heartbeat<T extends LeasedJob> extends Service {
  readonly #deps: HeartbeatDeps<T>;
  /** The renewal of locked rows in flight, if any: one at a time. */
  #renewing: Promise<void> | undefined;

  constructor(deps: HeartbeatDeps<T>, clock?: Clock) {
    super(clock);
    this.#deps = deps;
  }

  protected async run(): Promise<void> {
    while ((await this.wait(this.#deps.intervalMs)) !== 'stopped') await this.#beat();
  }

  async #beat(): Promise<void> {
    const jobs = this.#deps.leased();
    if (jobs.length === 0) return;
    try {
      const { held, cancelRequested, locked } = await this.#deps.beat(jobs);
      for (const job of jobs) if (!held.has(leaseKey(job))) this.#deps.onLost(job);
      if (locked.size > 0 && !this.#renewing) {
        // Best effort, beside the beats: a failure here leaves it to the next
        // beat. A wait the statement deadline cut beats again at once, so
        // that a lock ending now finds a renewal waiting, not an interval's
        // gap in which the sweeper could take a lease gone stale meanwhile.
        this.#renewing = this.#deps
          .renewLocked(jobs.filter((job) => locked.has(leaseKey(job))))
          .then(
            () => {},
            (error: unknown) => {
              if (isTimeout(error)) this.wake();
            },
          )
          .finally(() => {
            this.#renewing = undefined;
          });
      }
      if (cancelRequested.size > 0) {
        this.#deps.onCancelRequested(jobs.filter((job) => cancelRequested.has(leaseKey(job))));
      }
    } catch (error) {
      this.#deps.onError(translateError(error));
    }
  }
}
