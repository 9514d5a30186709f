/**
 * What an operator does with jobs: requeue dead and failed ones, look at one
 * or a page of them, count them per queue and status, sweep now. Each accepts
 * the caller's connection (`client`) like the producer does.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { Queryable } from '../db/executor.js';
import type { JobFilter, QueueStatsRow } from '../db/queries/inspect.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { REQUEUABLE_STATUSES } from '../db/queries/requeue.js';
import { ValidationError } from '../errors.js';
import { isJobId } from '../job/defaults.js';
import { JOB_STATUSES, type JobRecord, type JobStatus, type JobSummary } from '../job/job.js';
import { toTags } from '../job/tags.js';
import { integerInRange, parseOptions } from '../options.js';
import { type ClientOption, clientOrPool, queryable } from '../producer/job-options.js';

/** A status requeue accepts. */
type Requeuable = (typeof REQUEUABLE_STATUSES)[number];

/**
 * The fields that select jobs in `requeue`, `cancel` and `listJobs` (each adds
 * its own `status`); every field given must match.
 */
export interface JobSelection<Kind extends string = string> extends ClientOption {
  /** Job ids (decimal strings). */
  ids?: string[];
  /** Only jobs of these kinds (kinds of the Skiplock's kind map, when it has one). */
  kind?: Kind | Kind[];
  /** Only jobs of these queues. */
  queue?: string | string[];
  /** Only jobs having every one of these tags (one tag, or up to 20). */
  tags?: string | string[];
}

/** Which dead/failed/cancelled jobs to requeue; all given fields must match. Give a filter, or `all: true`. */
export interface RequeueFilter<Kind extends string = string> extends JobSelection<Kind> {
  /**
   * `dead`, `failed`, `cancelled`, or a list of them. @default dead and failed;
   * with `ids`, cancelled too
   */
  status?: Requeuable | Requeuable[];
  /** Requeue every dead and failed job; required when no other filter is given. */
  all?: boolean;
}

/** Filter and page of `listJobs`. */
export interface ListJobsFilter extends JobSelection {
  /** Only jobs of these statuses. */
  status?: JobStatus | JobStatus[];
  /** Most jobs returned. @default 100 */
  limit?: number;
  /** `newest` (highest id first, what an operator looks at first) or `oldest`. @default 'newest' */
  order?: 'newest' | 'oldest';
  /** Continue after this job id, in the listing's order: pass the last id of the previous page. */
  after?: string;
  /**
   * Read only the first this many characters of each payload's JSON text
   * (1–100000): the jobs come back as {@link JobSummary} (`payloadPreview`,
   * `payloadTruncated`, no `payload`), so a page costs the same whatever the
   * payloads' size. For list views; `getJob` reads a whole payload. @default the whole payloads
   */
  payloadPreviewChars?: number;
}

/** Counts per queue and status, and the oldest due queued job's age. */
export type QueueStats = QueueStatsRow;

/** A queue or kind name the database can store. */
export const storableName = z
  .string({ error: 'must be a string' })
  .refine((v) => !v.includes('\u0000') && v.isWellFormed(), { error: 'must be valid text without NUL' });
/** One name or a list of names. */
export const stringList = z.union([storableName, z.array(storableName)], {
  error: 'must be a string or an array of strings',
});
const jobId = z.string({ error: 'must be a job id (a decimal string)' }).refine(isJobId, {
  error: 'must be a job id (a decimal string within bigint range)',
});
/** A list of job ids. */
export const idList = z.array(jobId, { error: 'must be an array of job ids' });

/**
 * A `tags` filter: one tag or a non-empty list, each as an enqueue accepts it.
 *
 * @throws {ValidationError} naming `field` or the tag (`filter.tags[1]`).
 */
export function toTagFilter(value: unknown, field: string): string[] | undefined {
  if (value === undefined) return undefined;
  const tags = toTags(typeof value === 'string' ? [value] : value, field);
  if (!tags) throw new ValidationError(field, 'must hold at least one tag');
  return tags;
}

const requeueSchema = z.strictObject({
  client: queryable.optional(),
  ids: idList.optional(),
  status: z
    .union([z.enum(REQUEUABLE_STATUSES), z.array(z.enum(REQUEUABLE_STATUSES))], {
      error: "must be 'dead', 'failed' or 'cancelled'",
    })
    .optional(),
  kind: stringList.optional(),
  queue: stringList.optional(),
  // Checked by toTagFilter, which words the errors.
  tags: z.unknown().optional(),
  all: z.boolean({ error: 'must be a boolean' }).optional(),
});

const listSchema = z.strictObject({
  client: queryable.optional(),
  ids: idList.optional(),
  status: z
    .union([z.enum(JOB_STATUSES), z.array(z.enum(JOB_STATUSES))], {
      error: `must be one of ${JOB_STATUSES.join(', ')}`,
    })
    .optional(),
  kind: stringList.optional(),
  queue: stringList.optional(),
  // Checked by toTagFilter, which words the errors.
  tags: z.unknown().optional(),
  limit: integerInRange(1, 100_000).optional(),
  order: z.enum(['newest', 'oldest'], { error: "must be 'newest' or 'oldest'" }).optional(),
  after: jobId.optional(),
  payloadPreviewChars: integerInRange(1, 100_000).optional(),
});

/**
 * Requeues dead, failed or cancelled jobs: attempts 0, run_at now, last_error
 * cleared; wakes workers. Without `status`, dead and failed ones (and
 * cancelled ones too when `ids` are given).
 *
 * @returns how many jobs were requeued.
 * @throws {ValidationError} on a bad filter, or no filter without `all: true`.
 */
export async function requeue(queries: JobQueries, pool: pg.Pool, filter: unknown): Promise<number> {
  const { client, jobFilter } = parseRequeueFilter(filter);
  return queries.requeue.requeue(client ?? pool, jobFilter);
}

/**
 * The checks of {@link requeue}, without the database: what it would requeue.
 * The command line runs them before it connects.
 *
 * @throws {ValidationError} on a bad filter, or no filter without `all: true`.
 */
export function parseRequeueFilter(filter: unknown): { client: Queryable | undefined; jobFilter: JobFilter } {
  const parsed = parseOptions(requeueSchema, filter, 'filter');
  const narrowed =
    parsed.ids !== undefined ||
    parsed.status !== undefined ||
    parsed.kind !== undefined ||
    parsed.queue !== undefined ||
    parsed.tags !== undefined;
  if (!narrowed && parsed.all !== true) {
    throw new ValidationError(
      'filter',
      'give ids, status, kind, queue or tags, or all: true to requeue every dead and failed job',
    );
  }
  if (narrowed && parsed.all === true) {
    throw new ValidationError('filter.all', 'all: true cannot be combined with other filters');
  }
  const jobFilter = toFilter(parsed);
  // Jobs named by id are requeued from any requeuable status; a broad filter leaves cancelled ones be.
  if (jobFilter.ids && !jobFilter.status) jobFilter.status = [...REQUEUABLE_STATUSES];
  return { client: parsed.client, jobFilter };
}

/**
 * One job by id, or undefined when no such job is in the jobs table.
 *
 * @throws {ValidationError} (field `id`) when `id` is not a decimal job id.
 */
export async function getJob(
  queries: JobQueries,
  pool: pg.Pool,
  id: unknown,
  options: unknown,
): Promise<JobRecord | undefined> {
  if (!isJobId(id))
    throw new ValidationError('id', 'must be a job id (a decimal string within bigint range)');
  const db = clientOrPool(pool, options);
  const job = await queries.inspect.getById(db, id);
  if (!job) return job;
  // Dependencies: parents and children, shown only when there are some.
  const { dependsOn, children } = await queries.dependencies.edges(db, id);
  if (dependsOn.length > 0) job.dependsOn = dependsOn;
  if (children.length > 0) job.children = children;
  return job;
}

/**
 * A page of jobs matching the filter; with `payloadPreviewChars`, summaries
 * with a preview of each payload instead. @throws {ValidationError} on a bad filter.
 */
export async function listJobs(
  queries: JobQueries,
  pool: pg.Pool,
  filter: unknown,
): Promise<JobRecord[] | JobSummary[]> {
  const parsed = parseOptions(listSchema, filter, 'filter');
  const page = { limit: parsed.limit ?? 100, order: parsed.order ?? 'newest', after: parsed.after } as const;
  const db = parsed.client ?? pool;
  if (parsed.payloadPreviewChars !== undefined)
    return queries.inspect.listPreviews(db, toFilter(parsed), page, parsed.payloadPreviewChars);
  return queries.inspect.list(db, toFilter(parsed), page);
}

/** Counts per queue and status. @throws {ValidationError} on an unknown option. */
export async function stats(queries: JobQueries, pool: pg.Pool, options: unknown): Promise<QueueStats[]> {
  return queries.inspect.stats(clientOrPool(pool, options));
}

function toFilter(parsed: {
  ids?: string[] | undefined;
  status?: string | string[] | undefined;
  kind?: string | string[] | undefined;
  queue?: string | string[] | undefined;
  tags?: unknown;
}): JobFilter {
  const list = <T extends string>(v: T | T[] | undefined): T[] | undefined =>
    v === undefined ? undefined : Array.isArray(v) ? v : [v];
  const filter: JobFilter = {};
  if (parsed.ids) filter.ids = parsed.ids;
  const status = list(parsed.status) as JobStatus[] | undefined;
  if (status) filter.status = status;
  const kind = list(parsed.kind);
  if (kind) filter.kind = kind;
  const queue = list(parsed.queue);
  if (queue) filter.queue = queue;
  const tags = toTagFilter(parsed.tags, 'filter.tags');
  if (tags) filter.tags = tags;
  return filter;
}
