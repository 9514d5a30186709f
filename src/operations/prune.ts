/**
 * `skiplock.prune(filter)`: retention on demand. Deletes finished jobs (and
 * archived ones) older than a given age, in batches of 1000 rows per
 * statement: no long transaction, no long lock.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { JobQueries } from '../db/queries/jobs.js';
import { MAX_RETENTION_MS, PRUNABLE_STATUSES, type PrunableStatus } from '../db/queries/prune.js';
import { type PruneResult, prune as pruneBatches } from '../maintenance/pruner.js';
import { parseOptions } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';

export type { PrunableStatus, PruneResult };

/** What to prune. */
export interface PruneFilter extends ClientOption {
  /** Delete rows whose `finished_at` is older than this many milliseconds (database clock); ≥ 0. */
  olderThanMs: number;
  /** Only these finished statuses. @default succeeded, failed, dead and cancelled */
  status?: PrunableStatus | PrunableStatus[];
}

const pruneSchema = z.strictObject({
  client: queryable.optional(),
  olderThanMs: z
    .number({ error: 'must be a number of milliseconds' })
    .refine(Number.isFinite, { error: 'must be finite' })
    .refine((v) => v >= 0, { error: 'must be ≥ 0' })
    .refine((v) => v <= MAX_RETENTION_MS, { error: `must be ≤ ${MAX_RETENTION_MS}` }),
  status: z
    .union([z.enum(PRUNABLE_STATUSES), z.array(z.enum(PRUNABLE_STATUSES)).min(1)], {
      error: `must be one or more of ${PRUNABLE_STATUSES.join(', ')}`,
    })
    .optional(),
});

/**
 * Deletes finished jobs and archived jobs whose `finished_at` is older than
 * `olderThanMs`, a batch at a time until none is left. With `client`, every
 * batch runs on the caller's connection (inside its transaction, if any).
 *
 * @returns how many rows were deleted from the jobs table and from the archive.
 * @throws {ValidationError} on a bad filter (a missing or negative `olderThanMs`, an unknown status).
 * @throws {DatabaseError} from the database (batches already done stay done).
 */
export async function prune(queries: JobQueries, pool: pg.Pool, filter: unknown): Promise<PruneResult> {
  const parsed = parseOptions(pruneSchema, filter, 'filter');
  const status = parsed.status === undefined ? [...PRUNABLE_STATUSES] : [parsed.status].flat();
  return pruneBatches(parsed.client ?? pool, queries, status, parsed.olderThanMs);
}
