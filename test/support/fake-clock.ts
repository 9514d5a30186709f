/**
 * A fake {@link Clock} for loop tests, on `@sinonjs/fake-timers`: time moves
 * only when the test calls `tick`, and every timer and promise due by then
 * has run when it resolves.
 */
import FakeTimers from '@sinonjs/fake-timers';
import type { Clock } from '../../src/runtime/clock.js';

export interface FakeClock extends Clock {
  /** Moves time forward by `ms`, running due timers and the promises they settle. */
  tick(ms: number): Promise<void>;
  /** Timers still pending. */
  pending(): number;
}

export function fakeClock(startMs = 1_700_000_000_000): FakeClock {
  const clock = FakeTimers.createClock(startMs);
  return {
    now: () => clock.now,
    monotonic: () => clock.performance.now(),
    setTimeout: (callback, delayMs) => clock.setTimeout(callback, delayMs),
    clearTimeout: (timer) => {
      if (timer !== undefined) clock.clearTimeout(timer as FakeTimers.TimerId);
    },
    tick: async (ms) => {
      await clock.tickAsync(ms);
    },
    pending: () => clock.countTimers(),
  };
}
