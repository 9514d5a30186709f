/** The limits of a queue as `setQueueLimits` and `queues()` report them, for exact assertions. */
import type { QueueLimits } from '../../src/index.js';

/** A queue without limits. */
export const NO_LIMITS: QueueLimits = Object.freeze({
  concurrency: null,
  rate: null,
  groupConcurrency: null,
  groupRate: null,
  strictOrder: false,
});

/** {@link NO_LIMITS} with `set` in place: the whole object a queue with those limits reports. */
export function limitsWith(set: Partial<QueueLimits>): QueueLimits {
  return { ...NO_LIMITS, ...set };
}
