/**
 * What a producer may say about a job, its validation, and the mapping to the
 * row to insert. Pure: no I/O. Every bad value becomes a ValidationError whose
 * field has the caller's shape: `options.delayMs` for `enqueue`,
 * `jobs[3].delayMs` for `enqueueMany`, `payload.items[2]` inside a payload.
 */
import { z } from 'zod';
import type { Queryable } from '../db/executor.js';
import type { NewJob } from '../db/queries/insert.js';
import { ValidationError } from '../errors.js';
import { DEFAULT_QUEUE, MAX_DELAY_MS } from '../job/defaults.js';
import { assertName, assertStorableString, serializePayload } from '../job/job.js';
import { toTags } from '../job/tags.js';
import { toUniqueSpec, type UniqueOptions } from '../job/unique.js';
import { int32, parseOptions, validDate } from '../options.js';

/**
 * Options of one enqueued job. Give `runAt` or `delayMs`, not both, and
 * `startBy` or `startWithinMs`, not both. With a `uniqueKey`, see
 * {@link UniqueOptions}.
 */
export interface JobOptions extends UniqueOptions {
  /** Queue name (any non-empty string). @default 'default' */
  queue?: string | undefined;
  /** Larger runs first; a 32-bit integer. @default 0 */
  priority?: number | undefined;
  /** Earliest time to run. @default now (database clock) */
  runAt?: Date | undefined;
  /** Milliseconds from now (database clock) before the job may run; ≥ 0. @default 0 */
  delayMs?: number | undefined;
  /**
   * Attempts before the dead letter; an integer ≥ 1. Given, it wins over the
   * `maxAttempts` of the kind's handler. @default the handler's `maxAttempts`, else 20
   */
  maxAttempts?: number | undefined;
  /**
   * Labels for finding and acting on jobs together: `listJobs`, `cancel` and
   * `requeue` take a `tags` filter (jobs having every tag given). At most 20
   * distinct, non-empty strings of at most 100 characters each; any text
   * otherwise (stored as given). An empty array is no tags. With a unique key
   * held by another job, that job keeps its own tags (and start deadline),
   * `onConflict: 'replace'` included. @default no tags
   * @throws {ValidationError} naming the field (`options.tags`, or the tag: `options.tags[2]`).
   */
  tags?: string[] | undefined;
  /**
   * Start deadline: a job not claimed by then is never run; it ends
   * `cancelled` with a `last_error` that says it expired (by the database
   * clock, within a sweep interval of the deadline; no worker needs to see
   * it). A claim is the start: a job claimed in time runs to its end, even if
   * it waited in a worker's prefetch buffer past the deadline. Every return to
   * `queued` (a retry, a snooze, a release at shutdown, a lease reclaimed by
   * the sweeper) waits for a new start, so past the deadline the job expires
   * instead of running again. A requeue clears the deadline. @default no deadline
   */
  startBy?: Date | undefined;
  /**
   * Start deadline in milliseconds from now (database clock), as `startBy`;
   * more than 0 and than `delayMs`, as a deadline at the very instant the job
   * is due could only expire it: a `ValidationError` says so (beside `runAt`,
   * a date of your clock, only 0 is refused).
   * @default no deadline
   */
  startWithinMs?: number | undefined;
  /**
   * The job's group key (a tenant, an account; 1–200 characters): a queue's
   * group limits (`setQueueLimits` `groupConcurrency`, `groupRate`,
   * `strictOrder`) apply to the jobs of one key. @default none (no key)
   */
  groupKey?: string | undefined;
  /**
   * Parents: ids of jobs this one waits for. The job starts in status
   * `waiting` and is queued in the transaction that ends its last parent.
   * Parents must exist (in the jobs table or the archive) when the job is
   * enqueued: enqueue them in the same transaction, or use `enqueueMany`
   * with `ref`s, or keep their rows (a parent deleted on success before its
   * child is enqueued is unknown). A parent that already ended counts as
   * ended. Not with a `uniqueKey`. Takes UPDATE on the jobs table (the
   * worker role's rights). In `enqueueMany`, an entry may also be another
   * item's `ref`. At most 1000 entries.
   * @throws {ValidationError} naming the entry (`options.dependsOn[0]`) when it is not a job id or names no job; nothing is inserted.
   */
  dependsOn?: string[] | undefined;
  /**
   * What a parent that ends `failed`, `dead` or `cancelled` does to this job
   * while it waits: `'cancel'` ends it `cancelled`, with a `last_error`
   * naming the parent, and so on down to its own children; `'run'` counts the
   * parent as ended, so the job runs whatever its parents ended as (a
   * fan-in: read them with `parents()` on the handler context).
   * @default 'cancel'
   */
  onParentFailure?: 'cancel' | 'run' | undefined;
  /**
   * What this job's success leaves: `'delete'` removes the row, `'keep'` marks
   * it `succeeded`, `'archive'` moves it to the archive. With `'keep'` or
   * `'archive'` the handler's return value is stored as the job's `result`.
   * A job with children keeps its row and result until they have all
   * started, whatever its policy.
   * @default the worker's `onSuccess`
   */
  onSuccess?: 'delete' | 'keep' | 'archive' | undefined;
}

/** The caller's connection, accepted by every call that touches the database. */
export interface ClientOption {
  /**
   * The caller's connection, inside its BEGIN … COMMIT: the statement commits or
   * rolls back with the caller's transaction (and wakes workers only on commit).
   * Any object with `query(text, values)`. @default skiplock's pool (autocommit)
   */
  client?: Queryable | undefined;
}

/** Options of `enqueue`: the job's options and the caller's connection. */
export interface EnqueueOptions extends JobOptions, ClientOption {}

/** The `client` option: anything with a `query` method. */
export const queryable = z.custom<Queryable>((v) => typeof (v as Queryable)?.query === 'function', {
  error: 'must be a connection with a query(text, values) method',
});

const maxAttempts = z
  .number({ error: 'must be a number' })
  .int({ error: 'must be an integer' })
  .min(1, { error: 'must be ≥ 1' })
  .max(2_147_483_647, { error: 'must fit a 32-bit integer' });

const delayMs = z
  .number({ error: 'must be a number of milliseconds' })
  .refine(Number.isFinite, { error: 'must be finite' })
  .refine((v) => v >= 0, { error: 'must be ≥ 0' })
  .refine((v) => v <= MAX_DELAY_MS, { error: 'must be at most 10,000 years' });

const groupKey = z
  .string({ error: 'must be a string' })
  .min(1, { error: 'must not be empty' })
  .max(200, { error: 'must be at most 200 characters' });

const jobOptionShape = {
  queue: z.unknown().optional(),
  priority: int32.optional(),
  runAt: validDate.optional(),
  delayMs: delayMs.optional(),
  maxAttempts: maxAttempts.optional(),
  // Checked by toTags, which words the errors.
  tags: z.unknown().optional(),
  startBy: validDate.optional(),
  startWithinMs: delayMs.optional(),
  onSuccess: z
    .enum(['delete', 'keep', 'archive'], { error: "must be 'delete', 'keep' or 'archive'" })
    .optional(),
  // Checked by toUniqueSpec, which words the errors.
  uniqueKey: z.unknown().optional(),
  uniqueStates: z.unknown().optional(),
  onConflict: z.unknown().optional(),
  groupKey: groupKey.optional(),
  // Checked by toDependsOn, which words the errors.
  dependsOn: z.unknown().optional(),
  onParentFailure: z.enum(['cancel', 'run'], { error: "must be 'cancel' or 'run'" }).optional(),
};

/** `enqueue`'s options. */
export const enqueueOptionsSchema = z.strictObject({ client: queryable.optional(), ...jobOptionShape });
/** One item of `enqueueMany`. */
export const manyItemSchema = z.strictObject({
  kind: z.unknown(),
  payload: z.unknown(),
  // A name local to the call that other items' dependsOn may use.
  ref: z.unknown().optional(),
  ...jobOptionShape,
});
/** The options of calls that take only a connection. */
export const clientOptionsSchema = z.strictObject({ client: queryable.optional() });

/**
 * Where a call that takes only `{ client }` runs: the given client (the
 * caller's transaction), else `pool`.
 *
 * @throws {ValidationError} (field `options…`) on an unknown option or a client without `query`.
 */
export function clientOrPool(pool: Queryable, options: unknown): Queryable {
  return parseOptions(clientOptionsSchema, options, 'options').client ?? pool;
}

/** Job options as parsed. */
interface ParsedJobOptions {
  queue?: unknown;
  priority?: number | undefined;
  runAt?: Date | undefined;
  delayMs?: number | undefined;
  maxAttempts?: number | undefined;
  tags?: unknown;
  startBy?: Date | undefined;
  startWithinMs?: number | undefined;
  onSuccess?: 'delete' | 'keep' | 'archive' | undefined;
  uniqueKey?: unknown;
  uniqueStates?: unknown;
  onConflict?: unknown;
  groupKey?: string | undefined;
  dependsOn?: unknown;
  onParentFailure?: 'cancel' | 'run' | undefined;
}

/** Most parents one job may name. */
const MAX_PARENTS = 1000;

/** A job id as text: a positive 64-bit integer. */
const JOB_ID = /^[1-9][0-9]{0,18}$/;

/**
 * The entries of a `dependsOn` as given: a non-empty array of non-empty
 * strings (or integers, taken as ids), at most {@link MAX_PARENTS}.
 *
 * @throws {ValidationError} naming the field or the entry.
 */
export function toDependsOnEntries(value: unknown, field: string): string[] {
  if (!Array.isArray(value)) throw new ValidationError(field, 'must be an array of job ids');
  if (value.length === 0) throw new ValidationError(field, 'must name at least one job');
  if (value.length > MAX_PARENTS) throw new ValidationError(field, `must name at most ${MAX_PARENTS} jobs`);
  return value.map((entry, i) => {
    if (Number.isSafeInteger(entry) && (entry as number) > 0) return String(entry);
    if (typeof entry !== 'string' || entry.length === 0)
      throw new ValidationError(`${field}[${i}]`, 'must be a job id');
    return entry;
  });
}

/** Whether `entry` reads as a job id. */
export function isJobId(entry: string): boolean {
  return JOB_ID.test(entry) && BigInt(entry) <= 9_223_372_036_854_775_807n;
}

/**
 * The row to insert for one job.
 *
 * @param fields - field names for errors: `kind`, `payload`, and the prefix of option fields.
 * @throws {ValidationError} naming the field.
 */
export function toNewJob(
  kind: unknown,
  payload: unknown,
  options: ParsedJobOptions,
  fields: { kind: string; payload: string; options: string },
): NewJob {
  assertName(kind, fields.kind);
  const queue = options.queue === undefined ? DEFAULT_QUEUE : options.queue;
  assertName(queue, `${fields.options}queue`);
  if (options.runAt !== undefined && options.delayMs !== undefined) {
    throw new ValidationError(`${fields.options}delayMs`, 'give runAt or delayMs, not both');
  }
  const job: NewJob = {
    kind,
    queue,
    payloadJson: serializePayload(payload, fields.payload),
    priority: options.priority ?? 0,
    runAt: options.runAt ?? null,
    delayMs: options.delayMs ?? null,
    // Left out: null, so a kind's maxAttempts can apply (see NewJob.maxAttempts).
    maxAttempts: options.maxAttempts ?? null,
  };
  // Set only when given, so a job without them goes through the plain insert.
  if (options.tags !== undefined) {
    const tags = toTags(options.tags, `${fields.options}tags`);
    if (tags) job.tags = tags;
  }
  if (options.startBy !== undefined && options.startWithinMs !== undefined) {
    throw new ValidationError(`${fields.options}startWithinMs`, 'give startBy or startWithinMs, not both');
  }
  // A deadline not after the job is due would expire it unrun (no claim starts a job at the very
  // instant it is due): a mistake, said now (compared on one clock only: two dates, or two delays).
  if (options.startBy !== undefined && options.runAt !== undefined && options.startBy <= options.runAt)
    throw new ValidationError(`${fields.options}startBy`, 'is not after runAt: the job could never start');
  if (
    options.startWithinMs !== undefined &&
    options.startWithinMs <= (options.runAt === undefined ? (options.delayMs ?? 0) : 0)
  )
    throw new ValidationError(
      `${fields.options}startWithinMs`,
      'is not more than delayMs (0 when left out, or beside runAt): the job could never start',
    );
  if (options.startBy !== undefined) job.startBy = options.startBy;
  if (options.startWithinMs !== undefined) job.startWithinMs = options.startWithinMs;
  if (options.onSuccess !== undefined) job.onSuccess = options.onSuccess;
  if (
    options.uniqueKey !== undefined ||
    options.uniqueStates !== undefined ||
    options.onConflict !== undefined
  )
    job.unique = toUniqueSpec(options as UniqueOptions, fields.options);
  if (options.groupKey !== undefined) {
    assertStorableString(options.groupKey, `${fields.options}groupKey`);
    job.groupKey = options.groupKey;
  }
  if (options.dependsOn !== undefined) {
    if (job.unique) throw new ValidationError(`${fields.options}dependsOn`, 'not with a uniqueKey');
    job.dependsOn = toDependsOnEntries(options.dependsOn, `${fields.options}dependsOn`);
  }
  if (options.onParentFailure !== undefined) {
    if (options.dependsOn === undefined)
      throw new ValidationError(`${fields.options}onParentFailure`, 'only with dependsOn');
    job.onParentFailure = options.onParentFailure;
  }
  return job;
}

/** Fields of an `enqueueMany` item that the fast check knows. */
const ITEM_KEYS = new Set([
  'kind',
  'payload',
  'queue',
  'priority',
  'runAt',
  'delayMs',
  'maxAttempts',
  // Checked by toTags on every path.
  'tags',
  'onSuccess',
  // Checked by toUniqueSpec on every path.
  'uniqueKey',
  'uniqueStates',
  'onConflict',
]);

/**
 * The row for item `index` of `enqueueMany`. Items of the usual shape are
 * checked directly; anything unusual goes through the full schema, which also
 * words the error.
 *
 * @throws {ValidationError} naming `jobs[index].field`.
 */
export function toNewJobOfMany(item: unknown, index: number): NewJob {
  const prefix = `jobs[${index}]`;
  const fields = { kind: `${prefix}.kind`, payload: `${prefix}.payload`, options: `${prefix}.` };
  if (isUsualItem(item)) return toNewJob(item.kind, item.payload, item, fields);
  const parsed = parseOptions(manyItemSchema, item, prefix);
  return toNewJob(parsed.kind, parsed.payload, parsed, fields);
}

function isUsualItem(item: unknown): item is ParsedJobOptions & { kind: unknown; payload: unknown } {
  if (typeof item !== 'object' || item === null || Object.getPrototypeOf(item) !== Object.prototype)
    return false;
  for (const key in item) if (!ITEM_KEYS.has(key)) return false;
  const o = item as Record<string, unknown>;
  return (
    (o.priority === undefined ||
      (Number.isInteger(o.priority) &&
        (o.priority as number) >= -2_147_483_648 &&
        (o.priority as number) <= 2_147_483_647)) &&
    (o.maxAttempts === undefined ||
      (Number.isInteger(o.maxAttempts) &&
        (o.maxAttempts as number) >= 1 &&
        (o.maxAttempts as number) <= 2_147_483_647)) &&
    (o.onSuccess === undefined ||
      o.onSuccess === 'delete' ||
      o.onSuccess === 'keep' ||
      o.onSuccess === 'archive') &&
    (o.delayMs === undefined ||
      (typeof o.delayMs === 'number' && o.delayMs >= 0 && o.delayMs <= MAX_DELAY_MS)) &&
    o.runAt === undefined
  );
}
