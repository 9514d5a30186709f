/**
 * `skiplock.prune(filter)`: retention on demand. Deletes finished jobs (and
 * archived ones) older than a given age, in batches of 1000 rows per
 * statement: no long transaction, no long lock. The archive's whole expired
 * days are dropped as partitions, without DELETE.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { JobQueries } from '../db/queries/jobs.js';
import { MAX_RETENTION_MS, PRUNABLE_STATUSES, type PrunableStatus } from '../db/queries/prune.js';
import { ValidationError } from '../errors.js';
import { type PruneResult, prune as pruneBatches, type Retention } from '../maintenance/pruner.js';
import { parseOptions } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';

export type { PrunableStatus, PruneResult, Retention };

/**
 * What to prune: either one age (`olderThanMs`, for `status`, and for the
 * archive when `status` includes `succeeded` or is left out), or an age per
 * status and for the archive (`retention`, as the worker option of that name).
 */
export type PruneFilter = ClientOption &
  (
    | {
        /** Delete rows whose `finished_at` is older than this many milliseconds (database clock); ≥ 0. */
        olderThanMs: number;
        /** Only these finished statuses. @default succeeded, failed, dead and cancelled */
        status?: PrunableStatus | PrunableStatus[];
        retention?: never;
      }
    | {
        /** An age in milliseconds per status and for the archive; a status left out is not pruned. */
        retention: Retention;
        olderThanMs?: never;
        status?: never;
      }
  );

const ageMs = z
  .number({ error: 'must be a number of milliseconds' })
  .refine(Number.isFinite, { error: 'must be finite' })
  .refine((v) => v >= 0, { error: 'must be ≥ 0' })
  .refine((v) => v <= MAX_RETENTION_MS, { error: `must be ≤ ${MAX_RETENTION_MS}` });

/** The shape of a {@link Retention}: ages in milliseconds, 0 to 100 years. */
export const retentionSchema = z.strictObject(
  {
    succeeded: ageMs.optional(),
    failed: ageMs.optional(),
    dead: ageMs.optional(),
    cancelled: ageMs.optional(),
    archive: ageMs.optional(),
  },
  { error: 'must be an object of ages in milliseconds: succeeded, failed, dead, cancelled, archive' },
);

const pruneSchema = z.strictObject({
  client: queryable.optional(),
  olderThanMs: ageMs.optional(),
  status: z
    .union([z.enum(PRUNABLE_STATUSES), z.array(z.enum(PRUNABLE_STATUSES)).min(1)], {
      error: `must be one or more of ${PRUNABLE_STATUSES.join(', ')}`,
    })
    .optional(),
  retention: retentionSchema.optional(),
});

/**
 * Deletes finished jobs and archived jobs whose `finished_at` is older than
 * their age, a batch at a time until none is left. In the archive, day
 * partitions whose whole UTC day is older are dropped first (counted in
 * `archivePartitions`, their rows not counted); the older rows left (part of
 * a day, or in the default partition) are then deleted. With `client`, every
 * statement runs on the caller's connection (inside its transaction, if any;
 * a dropped partition then keeps the archive locked until that commits).
 *
 * @returns how many rows were deleted from the jobs table and from the
 *   archive, and how many archive partitions were dropped.
 * @throws {ValidationError} on a bad filter (neither or both of `olderThanMs`
 *   and `retention`, a negative age, an unknown status).
 * @throws {DatabaseError} from the database (batches already done stay done).
 */
export async function prune(queries: JobQueries, pool: pg.Pool, filter: unknown): Promise<PruneResult> {
  const parsed = parseOptions(pruneSchema, filter, 'filter');
  const db = parsed.client ?? pool;
  if (parsed.retention !== undefined) {
    if (parsed.olderThanMs !== undefined || parsed.status !== undefined) {
      throw new ValidationError('filter.retention', 'cannot be combined with olderThanMs or status');
    }
    return pruneBatches(db, queries, parsed.retention);
  }
  if (parsed.olderThanMs === undefined) {
    throw new ValidationError('filter.olderThanMs', 'is required (or give retention)');
  }
  const statuses = parsed.status === undefined ? [...PRUNABLE_STATUSES] : [parsed.status].flat();
  const retention: Retention = { archive: parsed.olderThanMs };
  for (const status of statuses) retention[status] = parsed.olderThanMs;
  return pruneBatches(db, queries, retention, statuses);
}
