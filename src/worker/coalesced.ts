/**
 * A background read run on request, coalesced: at most one run in flight, and
 * however many requests arrive meanwhile, one more run after it. Runs start
 * at least `minIntervalMs` apart, so a flood of requests (messages on the
 * wake-up channel, which any role can send) costs a bounded rate of reads.
 */
import type { Clock } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';

/** Least time between two reads caused by messages on the wake-up channel (milliseconds). */
export const CONTROL_READ_INTERVAL_MS = 50;

/** One coalesced background task; it starts with its first request. */
export class Coalesced extends Service {
  readonly #task: () => Promise<void>;
  readonly #minIntervalMs: number;
  #lastStart = Number.NEGATIVE_INFINITY;

  /**
   * @param task - the work of one run; must not reject (it reports its own errors).
   * @param minIntervalMs - least time between the starts of two runs, in milliseconds.
   * @param clock - defaults to the process's clock.
   */
  constructor(task: () => Promise<void>, minIntervalMs = 0, clock?: Clock) {
    super(clock);
    this.#task = task;
    this.#minIntervalMs = minIntervalMs;
  }

  /** Asks for a run: now, or after the one in flight (and the least interval). Ignored once stopped. */
  request(): void {
    if (this.stopped) return;
    this.start();
    this.wake();
  }

  protected async run(): Promise<void> {
    while ((await this.wait(Number.POSITIVE_INFINITY)) !== 'stopped') {
      // Requests during this wait are served by the run after it (wake-ups only shorten each wait).
      for (
        let left = this.#lastStart + this.#minIntervalMs - this.clock.monotonic();
        left > 0;
        left = this.#lastStart + this.#minIntervalMs - this.clock.monotonic()
      ) {
        if ((await this.wait(left)) === 'stopped') return;
      }
      this.#lastStart = this.clock.monotonic();
      await this.#task().catch(() => {});
    }
  }
}
