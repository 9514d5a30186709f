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
import { DEFAULT_QUEUE } from '../job/defaults.js';
import { assertName, serializePayload } from '../job/job.js';
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
   * ≥ 0. @default no deadline
   */
  startWithinMs?: number | undefined;
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

/** Longest delay accepted, in milliseconds: 10,000 years. */
export const MAX_DELAY_MS = 315_360_000_000_000;

const delayMs = z
  .number({ error: 'must be a number of milliseconds' })
  .refine(Number.isFinite, { error: 'must be finite' })
  .refine((v) => v >= 0, { error: 'must be ≥ 0' })
  .refine((v) => v <= MAX_DELAY_MS, { error: 'must be at most 10,000 years' });

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
  // Checked by toUniqueSpec, which words the errors.
  uniqueKey: z.unknown().optional(),
  uniqueStates: z.unknown().optional(),
  onConflict: z.unknown().optional(),
};

/** `enqueue`'s options. */
export const enqueueOptionsSchema = z.strictObject({ client: queryable.optional(), ...jobOptionShape });
/** One item of `enqueueMany`. */
export const manyItemSchema = z.strictObject({ kind: z.unknown(), payload: z.unknown(), ...jobOptionShape });
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
  uniqueKey?: unknown;
  uniqueStates?: unknown;
  onConflict?: unknown;
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
  if (options.startBy !== undefined) job.startBy = options.startBy;
  if (options.startWithinMs !== undefined) job.startWithinMs = options.startWithinMs;
  if (
    options.uniqueKey !== undefined ||
    options.uniqueStates !== undefined ||
    options.onConflict !== undefined
  )
    job.unique = toUniqueSpec(options as UniqueOptions, fields.options);
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
    (o.delayMs === undefined ||
      (typeof o.delayMs === 'number' && o.delayMs >= 0 && o.delayMs <= MAX_DELAY_MS)) &&
    o.runAt === undefined
  );
}
