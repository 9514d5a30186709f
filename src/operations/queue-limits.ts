/**
 * Global queue limits: at most `concurrency` jobs of a queue running at once,
 * and at most `rate.count` job starts per `rate.periodMs`, across every worker
 * and host. Limits are rows of the queues table: they outlive restarts and
 * apply to workers started later.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { JobQueries } from '../db/queries/jobs.js';
import type { QueueLimits, QueueLimitsChange, RateLimit } from '../db/queries/queue-limits.js';
import { ValidationError } from '../errors.js';
import { integerInRange, parseOptions } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';
import { queueName } from './queues.js';

export type { QueueLimits, RateLimit };

/** The limits `setQueueLimits` changes: a field left out stays as it is; `null` removes that limit. */
export interface QueueLimitsOptions extends ClientOption {
  /** Most jobs of the queue running at once across all workers (an integer ≥ 1); null removes the limit. */
  concurrency?: number | null;
  /** Most job starts per period across all workers; null removes the limit. */
  rate?: RateLimit | null;
}

const INT_MAX = 2_147_483_647;

const limitsSchema = z.strictObject({
  client: queryable.optional(),
  concurrency: integerInRange(1, INT_MAX).nullable().optional(),
  rate: z
    .strictObject(
      { count: integerInRange(1, INT_MAX), periodMs: integerInRange(1, INT_MAX) },
      { error: 'must be { count, periodMs } or null' },
    )
    .nullable()
    .optional(),
});

/**
 * Sets or removes a queue's global limits and tells running workers at once
 * (they also re-read limits on every poll). Jobs already running when a limit
 * is lowered finish; no new job of the queue starts until it fits.
 *
 * @returns the queue's limits now in force.
 * @throws {ValidationError} naming the field (`name`, `concurrency`, `rate`,
 *   `rate.count`, `rate.periodMs`) on bad input, or `limits` when neither
 *   `concurrency` nor `rate` is given; nothing is changed then.
 */
export async function setQueueLimits(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  limits: unknown,
): Promise<QueueLimits> {
  const queue = queueName(name);
  if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) {
    throw new ValidationError('limits', 'must be an object: { concurrency, rate }');
  }
  const parsed = parseOptions(limitsSchema, limits, '');
  if (parsed.concurrency === undefined && parsed.rate === undefined) {
    throw new ValidationError('limits', 'give concurrency or rate (null removes that limit)');
  }
  const change: QueueLimitsChange = {};
  if (parsed.concurrency !== undefined) change.concurrency = parsed.concurrency;
  if (parsed.rate !== undefined) change.rate = parsed.rate;
  return queries.queueLimits.set(parsed.client ?? pool, queue, change);
}
