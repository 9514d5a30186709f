/**
 * How background loops answer database errors: a pause before they retry,
 * and a smaller statement after one timed out.
 */
import { isTimeout } from '../db/executor.js';
import type { Clock } from '../runtime/clock.js';

/**
 * Pause before a background loop retries after a database error (connection
 * lost, server restarting): 100 ms doubling to 5 s, with jitter so that many
 * workers do not reconnect in lockstep.
 */
export function loopBackoffMs(consecutiveFailures: number): number {
  const base = Math.min(100 * 2 ** Math.min(consecutiveFailures, 6), 5000);
  return base * (0.5 + Math.random() * 0.5);
}

/**
 * After a statement of `size` rows timed out, statements take at most half
 * as many for this long (milliseconds), then twice as many again, and so on:
 * a deadline that a full statement cannot meet costs one timeout a minute.
 */
export const SIZE_CAP_RECOVERY_MS = 60_000;

/**
 * The most rows one statement of a loop (a claim, a batch of results) may
 * take: halved when such a statement times out (the worker's client-side
 * deadline, or the server's `statement_timeout`), doubled back after
 * {@link SIZE_CAP_RECOVERY_MS} without a timeout, until it no longer binds.
 */
export class SizeCap {
  #cap = Number.POSITIVE_INFINITY;
  /** Monotonic time of the last change. */
  #changedAt = Number.NEGATIVE_INFINITY;
  readonly #clock: Clock;
  /** The size at which the cap no longer binds. */
  readonly #full: number;

  constructor(clock: Clock, full: number) {
    this.#clock = clock;
    this.#full = full;
  }

  /** The most rows the next statement may take (infinite when nothing timed out lately). */
  get value(): number {
    return this.#cap;
  }

  /**
   * What `statement`, sent for `size` rows, resolves to; when it fails on a
   * timeout, the cap halves below `size` first, and when it succeeds a cap a
   * recovery period old doubles.
   *
   * @throws whatever `statement` rejects with.
   */
  async watch<T>(size: number, statement: Promise<T>): Promise<T> {
    try {
      const result = await statement;
      this.#succeeded();
      return result;
    } catch (error) {
      if (isTimeout(error)) {
        this.#cap = Math.min(this.#cap, Math.max(1, Math.floor(size / 2)));
        this.#changedAt = this.#clock.monotonic();
      }
      throw error;
    }
  }

  #succeeded(): void {
    if (this.#cap === Number.POSITIVE_INFINITY) return;
    const now = this.#clock.monotonic();
    if (now - this.#changedAt < SIZE_CAP_RECOVERY_MS) return;
    const cap = this.#cap * 2;
    this.#cap = cap >= this.#full ? Number.POSITIVE_INFINITY : cap;
    this.#changedAt = now;
  }
}
