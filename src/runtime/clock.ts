/**
 * The clock every loop reads: wall time, monotonic time and timers, injected
 * so that tests can drive a loop with a fake clock (`createClock()` of
 * `@sinonjs/fake-timers` fits this shape) instead of waiting in real time.
 */

/** A pending timer, as {@link Clock.setTimeout} returns it. */
export type TimerHandle = unknown;

/** How a timer of the system clock treats the process. */
export interface TimerOptions {
  /**
   * Keep the process alive until the timer fires: for a deadline someone
   * awaits, or a retry that must happen while nothing else is pending.
   * @default false
   */
  keepAlive?: boolean;
}

/** Time and timers, as a loop sees them. */
export interface Clock {
  /** Wall-clock time in milliseconds since the epoch (`Date.now()`). */
  now(): number;
  /** Monotonic time in milliseconds from an arbitrary origin (`performance.now()`). */
  monotonic(): number;
  /**
   * Calls `callback` once after `delayMs` milliseconds. The system clock's
   * timers do not keep the process alive (`unref`) unless `options.keepAlive`.
   */
  setTimeout(callback: () => void, delayMs: number, options?: TimerOptions): TimerHandle;
  /** Cancels a timer; `undefined` or a timer that already fired is ignored. */
  clearTimeout(timer: TimerHandle | undefined): void;
}

/** Longest delay a Node.js timer takes (about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2_147_483_647;

/** The process's own clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout(callback, delayMs, options) {
    const timer = setTimeout(callback, Math.min(Math.max(0, delayMs), MAX_TIMER_MS));
    if (!options?.keepAlive) timer.unref();
    return timer;
  },
  clearTimeout(timer) {
    if (timer !== undefined) clearTimeout(timer as NodeJS.Timeout);
  },
};

/**
 * Resolves after `delayMs` on `clock`, or as soon as `signal` aborts (never
 * rejects: the caller checks the signal).
 */
export function sleep(
  clock: Clock,
  delayMs: number,
  signal?: AbortSignal,
  options?: TimerOptions,
): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clock.clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = clock.setTimeout(done, delayMs, options);
    signal?.addEventListener('abort', done, { once: true });
  });
}
