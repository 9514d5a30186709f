/** Enqueuing thousands of jobs for a scenario, a statement per thousand. */
import type { EnqueueManyItem, JobMap, Skiplock } from '../../../src/index.js';

/** Jobs per `enqueueMany` statement. */
const BATCH = 1000;

/**
 * Enqueues `count` jobs, `job(n)` making the n-th (called in order, n from
 * 0), in batches of a thousand; resolves with their ids in order.
 */
export async function enqueueInBatches<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  count: number,
  job: (n: number) => EnqueueManyItem<Jobs>,
): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, count - start) }, (_, i) => job(start + i));
    ids.push(...(await skiplock.enqueueMany(batch)).map((j) => j.id));
  }
  return ids;
}
