/**
 * How many jobs a worker claims at a time: its free slots, plus a prefetch
 * buffer while a backlog waits. The buffer is sized by the handlers' recent
 * run times, so that buffered jobs start within a short horizon: fast jobs are
 * claimed many per round trip, and slow jobs are never held back from other
 * workers.
 */

/** Buffered jobs should start within this many milliseconds, judged by recent run times. */
export const PREFETCH_HORIZON_MS = 100;

/** The worker's limits, as resolved options. */
export interface PrefetchLimits {
  concurrency: number;
  prefetch: number;
  batchSize: number;
}

/** Where the worker stands when it may claim. */
export interface HeldJobs {
  running: number;
  buffered: number;
  /** The last claim came back full: more jobs may be waiting. */
  backlog: boolean;
  /** Finished jobs whose results are not written yet (still running in the table). */
  unwritten: number;
}

/** Tracks handler run times and turns them into claim sizes. */
export class PrefetchPolicy {
  readonly #limits: PrefetchLimits;
  /** Moving average of handler run times (ms); infinite until one finished. */
  #averageRunMs = Number.POSITIVE_INFINITY;
  /** `performance.now()` when a handler last started. */
  #lastStartAt = 0;

  constructor(limits: PrefetchLimits) {
    this.#limits = limits;
  }

  /** A handler started at `at` (`performance.now()`). */
  started(at: number): void {
    this.#lastStartAt = at;
  }

  /** A handler ran for `runMs`. */
  finished(runMs: number): void {
    this.#averageRunMs =
      this.#averageRunMs === Number.POSITIVE_INFINITY ? runMs : this.#averageRunMs * 0.9 + runMs * 0.1;
  }

  /**
   * How many buffered jobs are worth keeping: those the handlers should start
   * within the horizon by their recent run times (at most `prefetch`), twice
   * over, plus a slot's worth. Beyond it, jobs claimed while handlers were fast
   * wait behind slow ones that other workers could run: the worker gives the
   * newest of them back. Infinite until a handler finished.
   */
  bufferLimit(): number {
    const { concurrency, prefetch } = this.#limits;
    if (this.#averageRunMs === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    const ahead = Math.min(
      prefetch,
      Math.floor((concurrency * PREFETCH_HORIZON_MS) / Math.max(this.#averageRunMs, 0.001)),
    );
    return 2 * ahead + concurrency;
  }

  /** How many jobs to claim now; 0 means wait for a slot or a wake-up. */
  claimLimit(held: HeldJobs, now: number): number {
    const { concurrency, prefetch, batchSize } = this.#limits;
    const ahead = held.backlog
      ? Math.min(
          prefetch,
          Math.floor((concurrency * PREFETCH_HORIZON_MS) / Math.max(this.#averageRunMs, 0.001)),
        )
      : 0;
    const room = concurrency + ahead - held.running - held.buffered;
    if (room <= 0) return 0;
    // Results lag behind (a slow database): claim no more until they catch up.
    if (held.unwritten > 2 * (concurrency + prefetch)) return 0;
    // Every slot busy and nothing started lately: handlers are slow now; leave the jobs to others.
    if (held.running >= concurrency && now - this.#lastStartAt > PREFETCH_HORIZON_MS) return 0;
    // Top the buffer up once it is half empty, so that each claim takes a worthwhile batch.
    if ((held.buffered === 0 && held.running < concurrency) || (ahead > 0 && held.buffered * 2 <= ahead))
      return Math.min(batchSize, room);
    return 0;
  }
}
