/**
 * `skiplock.cancel(filter)`: waiting and queued jobs end `cancelled` at once; for running
 * ones the worker holding the lease is told to abort the handler, and the job
 * ends `cancelled` when the handler stops, whatever it returns.
 */
import type pg from 'pg';
import { z } from 'zod';
import { CANCELLABLE_STATUSES, type CancelCounts, type CancellableStatus } from '../db/queries/cancel.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { ValidationError } from '../errors.js';
import { parseOptions } from '../options.js';
import { queryable } from '../producer/job-options.js';
import { idList, type JobSelection, stringList, toTagFilter } from './operations.js';

export type { CancelCounts };

/** Which jobs to cancel; every given field must match, and at least one must be given. */
export interface CancelFilter<Kind extends string = string> extends JobSelection<Kind> {
  /** Only jobs in these statuses: `waiting`, `queued`, `running`. @default all three */
  status?: CancellableStatus | CancellableStatus[];
}

const cancelSchema = z.strictObject({
  client: queryable.optional(),
  ids: idList.optional(),
  status: z
    .union([z.enum(CANCELLABLE_STATUSES), z.array(z.enum(CANCELLABLE_STATUSES))], {
      error: "must be 'waiting', 'queued' or 'running'",
    })
    .optional(),
  kind: stringList.optional(),
  queue: stringList.optional(),
  // Checked by toTagFilter, which words the errors.
  tags: z.unknown().optional(),
});

const list = <T>(v: T | T[] | undefined): T[] | undefined =>
  v === undefined ? undefined : Array.isArray(v) ? v : [v];

/**
 * Cancels the queued and running jobs matching `filter`. Finished jobs are
 * left as they are (and not counted).
 *
 * @returns `cancelled`: queued jobs now `cancelled`; `running`: running jobs
 *   whose worker was asked to abort them (each ends `cancelled` within about a
 *   second when its handler honours the signal, else when the handler returns).
 * @throws {ValidationError} on a bad filter, or an empty one.
 * @throws {DatabaseError} from the database.
 */
export async function cancel(queries: JobQueries, pool: pg.Pool, filter: unknown): Promise<CancelCounts> {
  const { client, selection } = parseCancelFilter(filter);
  return queries.cancel.cancel(client ?? pool, selection);
}

/**
 * The checks of {@link cancel}, without the database: what it would cancel.
 * The command line runs them before it connects.
 *
 * @throws {ValidationError} on a bad filter, or none at all.
 */
export function parseCancelFilter(filter: unknown) {
  const parsed = parseOptions(cancelSchema, filter, 'filter');
  const ids = parsed.ids;
  const status = list(parsed.status);
  const kind = list(parsed.kind);
  const queue = list(parsed.queue);
  const tags = toTagFilter(parsed.tags, 'filter.tags');
  if (!ids && !status && !kind && !queue && !tags) {
    throw new ValidationError(
      'filter',
      'give ids, status, kind, queue or tags (cancel never means every job)',
    );
  }
  const selection = {
    ...(ids && { ids }),
    ...(status && { status }),
    ...(kind && { kind }),
    ...(queue && { queue }),
    ...(tags && { tags }),
  };
  return { client: parsed.client, selection };
}
