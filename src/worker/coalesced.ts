/**
 * A background read run on request, coalesced: at most one run in flight, and
 * however many requests arrive meanwhile, one more run after it. Runs start
 * at least `minIntervalMs` apart, so a flood of requests (messages on the
 * wake-up channel, which any role can send) costs a bounded rate of reads.
 */

/** Least time between two reads caused by messages on the wake-up channel (milliseconds). */
export const CONTROL_READ_INTERVAL_MS = 50;

/** One coalesced background task. */
export class Coalesced {
  readonly #task: () => Promise<void>;
  readonly #minIntervalMs: number;
  /** The last loop of runs (resolved once it ended). */
  #running: Promise<void> | undefined;
  /** A loop of runs is going on: a request joins it. */
  #looping = false;
  /** The pass of the task in flight, while there is one. */
  #pass: Promise<void> | undefined;
  #again = false;
  #lastStart = Number.NEGATIVE_INFINITY;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #wakeTimer: (() => void) | undefined;

  /**
   * @param task - the work of one run; must not reject (it reports its own errors).
   * @param minIntervalMs - least time between the starts of two runs, in milliseconds.
   */
  constructor(task: () => Promise<void>, minIntervalMs = 0) {
    this.#task = task;
    this.#minIntervalMs = minIntervalMs;
  }

  /** Asks for a run: now, or after the one in flight (and the least interval). */
  request(): void {
    if (this.#stopped) return;
    this.#again = true;
    if (this.#looping) return;
    this.#looping = true;
    this.#running = this.#loop();
  }

  /** The pass in flight (not the ones requested after it), or undefined when none is. */
  current(): Promise<void> | undefined {
    return this.#pass;
  }

  /** Runs no more; resolves when the pass in flight is done. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#wakeTimer?.();
    await this.#running;
  }

  async #loop(): Promise<void> {
    try {
      while (this.#again && !this.#stopped) {
        const wait = this.#lastStart + this.#minIntervalMs - performance.now();
        if (wait > 0) {
          await new Promise<void>((resolve) => {
            this.#wakeTimer = resolve;
            this.#timer = setTimeout(resolve, wait);
            this.#timer.unref();
          });
          this.#wakeTimer = undefined;
          if (this.#stopped) return;
        }
        // Requests that came during the wait are served by this run.
        this.#again = false;
        this.#lastStart = performance.now();
        this.#pass = this.#task().catch(() => {});
        await this.#pass;
        this.#pass = undefined;
      }
    } finally {
      // Cleared in the same turn as the last check of #again: a request after it starts a new loop.
      this.#looping = false;
    }
  }
}
