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
import { definedOnly, integerInRange, parseOptions } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';
import { queueName } from './queues.js';

export type { QueueLimits, RateLimit };

/** The limits `setQueueLimits` changes: a field left out stays as it is; `null` removes that limit. */
export interface QueueLimitsOptions extends ClientOption {
  /** Most jobs of the queue running at once across all workers (an integer ≥ 1); null removes the limit. */
  concurrency?: number | null;
  /** Most job starts per period across all workers; null removes the limit. */
  rate?: RateLimit | null;
  /**
   * Most jobs of one group key (the `groupKey` enqueue option) running at once
   * across all workers (an integer ≥ 1; 1 runs a key's jobs one at a time);
   * null removes the limit. Free slots go to the keys round-robin.
   */
  groupConcurrency?: number | null;
  /** Most job starts of one group key per period across all workers; null removes the limit. */
  groupRate?: RateLimit | null;
  /**
   * true: the jobs of a key start in (priority, run_at, id) order, and a job
   * of the key waiting to retry holds the ones behind it. @default false
   */
  strictOrder?: boolean;
}

const INT_MAX = 2_147_483_647;

const rateSchema = z
  .strictObject(
    { count: integerInRange(1, INT_MAX), periodMs: integerInRange(1, INT_MAX) },
    { error: 'must be { count, periodMs } or null' },
  )
  .nullable()
  .optional();

const limitsSchema = z.strictObject({
  client: queryable.optional(),
  concurrency: integerInRange(1, INT_MAX).nullable().optional(),
  rate: rateSchema,
  groupConcurrency: integerInRange(1, INT_MAX).nullable().optional(),
  groupRate: rateSchema,
  strictOrder: z.boolean({ error: 'must be true or false' }).optional(),
});

/**
 * Sets or removes a queue's global limits and tells running workers at once
 * (they also re-read limits on every poll). Jobs already running when a limit
 * is lowered finish; no new job of the queue starts until it fits.
 *
 * @returns the queue's limits now in force.
 * @throws {ValidationError} naming the field (`name`, `concurrency`, `rate`,
 *   `rate.count`, `rate.periodMs`, `groupConcurrency`, `groupRate`,
 *   `groupRate.count`, `groupRate.periodMs`, `strictOrder`) on bad input, or
 *   `limits` when none of them is given; nothing is changed then.
 */
export async function setQueueLimits(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  limits: unknown,
): Promise<QueueLimits> {
  const queue = queueName(name);
  if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) {
    throw new ValidationError(
      'limits',
      'must be an object: { concurrency, rate, groupConcurrency, groupRate, strictOrder }',
    );
  }
  const parsed = parseOptions(limitsSchema, limits, '');
  const change: QueueLimitsChange = definedOnly({
    concurrency: parsed.concurrency,
    rate: parsed.rate,
    groupConcurrency: parsed.groupConcurrency,
    groupRate: parsed.groupRate,
    strictOrder: parsed.strictOrder,
  });
  if (Object.keys(change).length === 0) {
    throw new ValidationError(
      'limits',
      'give concurrency, rate, groupConcurrency, groupRate or strictOrder (null removes that limit)',
    );
  }
  return queries.queueLimits.set(parsed.client ?? pool, queue, change);
}
