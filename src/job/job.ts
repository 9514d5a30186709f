/**
 * The job as producers, handlers and operators see it, and the rules a payload
 * and a name must satisfy before they reach the database. Pure: no I/O.
 */
import { ValidationError } from '../errors.js';
import type { AttemptError } from './attempt-history.js';

/** Every status a job can have (the jobs table's CHECK constraint). */
export const JOB_STATUSES = [
  'waiting',
  'queued',
  'running',
  'succeeded',
  'failed',
  'dead',
  'cancelled',
] as const;

/** A job's status. See docs/state-machine.md for the transitions. */
export type JobStatus = (typeof JOB_STATUSES)[number];

/** A map from kind to payload type, as given to `new Skiplock<Jobs>()`. */
export type JobMap = Record<string, unknown>;

/**
 * A job as handlers and producers see it.
 *
 * `id` is the bigint primary key as a decimal string; times are the database's.
 */
export interface Job<Kind extends string = string, Payload = unknown> {
  /** Primary key, the bigint as a decimal string. */
  id: string;
  /** The job's type; routes it to a handler. */
  kind: Kind;
  /** The lane the job waits in. */
  queue: string;
  /** The job's JSON arguments. */
  payload: Payload;
  /** Larger runs first. */
  priority: number;
  /** Earliest time the job may run (scheduling and backoff). */
  runAt: Date;
  /** Claims so far, including the current one: a handler's first run sees 1. */
  attempts: number;
  /** After this many failed attempts the job goes to the dead letter. */
  maxAttempts: number;
  /** When the job was inserted. */
  createdAt: Date;
}

/** A job with the bookkeeping columns operators inspect (`getJob`, `listJobs`). */
export interface JobRecord<Kind extends string = string, Payload = unknown> extends Job<Kind, Payload> {
  status: JobStatus;
  /** Last heartbeat or claim time of a running job; null otherwise. */
  lockedAt: Date | null;
  /** Id of the worker holding the lease; null unless running. */
  lockedBy: string | null;
  /** Claims of this job ever (a bigint as a decimal string): +1 per claim, never reset; fences results. */
  leaseSeq: string;
  /** Readable text of the last failure; null when none. */
  lastError: string | null;
  /** When the job reached succeeded, failed, dead or cancelled; null otherwise. */
  finishedAt: Date | null;
  /** When a cancel of this job was requested (set on every cancelled job, and on a running one until its worker ends it); null otherwise. */
  cancelRequestedAt: Date | null;
  /**
   * Its failed attempts, oldest first, the newest 20 kept: each attempt's
   * number, error text, time and worker id. Requeue keeps them; a snooze or a
   * release (shutdown) adds none; a lease reclaimed by the sweeper adds one.
   * Empty when the job never failed.
   */
  errors: AttemptError[];
  /** The job's tags, as given at enqueue (see `JobOptions.tags`); empty when it has none. */
  tags: string[];
  /**
   * The job's start deadline: not claimed by then, it is never run and ends
   * `cancelled` (`last_error` says it expired); null when it has none.
   */
  startBy: Date | null;
  /**
   * The job's group key, as given at enqueue (see `JobOptions.groupKey`): the
   * key a queue's group limits count it under; null when it has none.
   */
  groupKey: string | null;
  /**
   * The handler's return value, stored when the job's row outlived its success
   * (`onSuccess` `'keep'` or `'archive'`); null when none. Read by `getJob` only
   * (absent from lists).
   */
  result?: unknown;
  /** The handler's last progress value (`progress()`); null when none. Read by `getJob` only. */
  progress?: unknown;
  /** The handler's newest log lines (`log()`), oldest first. Read by `getJob` only. */
  logs?: { at: Date; line: string }[];
  /**
   * The job's parents (`dependsOn`), by id, each with its status now (or what
   * it ended as, once its row is gone); set by `getJob` on a job that has
   * parents, absent otherwise.
   */
  dependsOn?: JobLink[] | undefined;
  /** The job's children (jobs that named it in `dependsOn`), by id; set by `getJob` on a job that has some. */
  children?: JobLink[] | undefined;
}

/** Another job of a job's graph, as `getJob` shows it. */
export interface JobLink {
  id: string;
  kind: string;
  /** Its status; null when its row is gone and its end was not recorded. */
  status: JobStatus | null;
}

/**
 * A job as list views read it (`listJobs` with `payloadPreviewChars`): every
 * field of {@link JobRecord} but the payload, of which only the start of its
 * JSON text is read.
 */
export interface JobSummary<Kind extends string = string> extends Omit<JobRecord<Kind>, 'payload'> {
  /** The first `payloadPreviewChars` characters of the payload's JSON text (as PostgreSQL writes jsonb). */
  payloadPreview: string;
  /** Whether the payload's JSON text is longer than the preview. */
  payloadTruncated: boolean;
}

/** The job as handlers and producers see it, without the bookkeeping columns. */
export function toJob(record: JobRecord): Job {
  return {
    id: record.id,
    kind: record.kind,
    queue: record.queue,
    payload: record.payload,
    priority: record.priority,
    runAt: record.runAt,
    attempts: record.attempts,
    maxAttempts: record.maxAttempts,
    createdAt: record.createdAt,
  };
}

/** Longest queue or kind name, in UTF-8 bytes: it must fit a btree index entry. */
export const MAX_NAME_BYTES = 1024;

/** Largest payload JSON text, in UTF-8 bytes: jsonb's 256 MiB. */
const MAX_PAYLOAD_BYTES = 2 ** 28;

/**
 * Default largest payload accepted by `enqueue`, in bytes of UTF-8 JSON: 1 MiB,
 * the message limit of Amazon SQS. A job's payload should carry ids and small
 * arguments, not documents; larger data belongs in a table or object store.
 */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

/** Deepest payload nesting accepted. */
export const MAX_PAYLOAD_DEPTH = 1000;

/**
 * Checks a queue or kind name. Any string is data (quotes, SQL, unicode are
 * stored as given); only what PostgreSQL cannot store or index is refused.
 *
 * @throws {ValidationError} empty, not a string, a NUL character, a lone
 *   surrogate, or longer than {@link MAX_NAME_BYTES} bytes.
 */
export function assertName(value: unknown, field: string): asserts value is string {
  if (typeof value !== 'string') throw new ValidationError(field, `must be a string, got ${typeName(value)}`);
  if (value.length === 0) throw new ValidationError(field, 'must not be empty');
  assertStorableString(value, field);
  if (Buffer.byteLength(value, 'utf8') > MAX_NAME_BYTES) {
    throw new ValidationError(field, `must be at most ${MAX_NAME_BYTES} bytes of UTF-8`);
  }
}

/**
 * Turns a payload into JSON text after checking that it is JSON and that
 * PostgreSQL's jsonb can store it so that it reads back equal.
 *
 * `undefined` at the top stands for the default payload `{}`.
 *
 * @returns the JSON text to bind as a `jsonb` parameter.
 * @throws {ValidationError} naming the path (`payload.items[2]`) of a BigInt,
 *   function, symbol, undefined, non-finite number, Date or other class
 *   instance, array hole, circular reference, NUL character or lone surrogate.
 */
export function serializePayload(payload: unknown, field = 'payload'): string {
  if (payload === undefined) return '{}';
  checkJsonValue(payload, field, new Set(), 0);
  const json = JSON.stringify(payload);
  // jsonb holds at most 256 MiB; a longer text fails in the server with a less useful error.
  if (json.length >= MAX_PAYLOAD_BYTES / 4 && Buffer.byteLength(json, 'utf8') >= MAX_PAYLOAD_BYTES) {
    throw new ValidationError(field, 'larger than PostgreSQL jsonb can hold (256 MiB)');
  }
  return json;
}

/**
 * Checks a payload's JSON text against a size limit.
 *
 * @throws {ValidationError} naming `field` when it is longer than `maxBytes` bytes of UTF-8.
 */
export function assertPayloadSize(json: string, field: string, maxBytes: number): void {
  // A UTF-16 unit is at most 3 bytes of UTF-8: most payloads need no byte count at all.
  if (json.length * 3 <= maxBytes) return;
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) {
    throw new ValidationError(field, `is ${bytes} bytes of JSON, more than maxPayloadBytes (${maxBytes})`);
  }
}

function checkJsonValue(value: unknown, path: string, seen: Set<object>, depth: number): void {
  switch (typeof value) {
    case 'string':
      assertStorableString(value, path);
      return;
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new ValidationError(path, `${value} is not a JSON number`);
      return;
    case 'object':
      break;
    default:
      throw new ValidationError(path, `${typeName(value)} is not JSON`);
  }
  if (value === null) return;
  if (depth >= MAX_PAYLOAD_DEPTH)
    throw new ValidationError(path, `nested deeper than ${MAX_PAYLOAD_DEPTH} levels`);
  if (seen.has(value)) throw new ValidationError(path, 'circular reference');
  seen.add(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const itemPath = `${path}[${i}]`;
      if (!(i in value)) throw new ValidationError(itemPath, 'array hole is not JSON');
      checkJsonValue(value[i], itemPath, seen, depth + 1);
    }
  } else {
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      throw new ValidationError(
        path,
        `${typeName(value)} is not a plain JSON object (${conversionHint(value)})`,
      );
    }
    for (const key of Object.keys(value)) {
      assertStorableString(key, `${path} key ${JSON.stringify(key)}`);
      checkJsonValue((value as Record<string, unknown>)[key], `${path}.${key}`, seen, depth + 1);
    }
    if (Object.getOwnPropertySymbols(value).length > 0)
      throw new ValidationError(path, 'symbol keys are not JSON');
  }
  seen.delete(value);
}

/** How to turn a non-plain object into JSON, for the error message. */
function conversionHint(value: object): string {
  if (value instanceof Date) return 'convert it first, e.g. date.toISOString()';
  if (value instanceof Map)
    return 'convert it first, e.g. Object.fromEntries(map), or [...map] for non-string keys';
  if (value instanceof Set) return 'convert it first, e.g. [...set]';
  if (ArrayBuffer.isView(value)) return 'convert it first, e.g. Buffer.from(bytes).toString("base64")';
  if (value instanceof URL) return 'convert it first, e.g. url.href';
  return 'copy its fields into a plain object first';
}

/**
 * Checks that PostgreSQL can store a string as text.
 *
 * @throws {ValidationError} naming `field` on a NUL character or a lone surrogate.
 */
export function assertStorableString(value: string, field: string): void {
  if (value.includes('\u0000'))
    throw new ValidationError(field, 'contains a NUL character, which PostgreSQL cannot store');
  if (!value.isWellFormed())
    throw new ValidationError(field, 'contains a lone surrogate (not valid Unicode)');
}

/** A short description of a value's type for error messages. */
export function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') {
    const name = Object.getPrototypeOf(value)?.constructor?.name;
    return name && name !== 'Object' ? `a ${name}` : 'an object';
  }
  if (typeof value === 'bigint') return 'a BigInt';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (value === undefined) return 'undefined';
  return `a ${typeof value}`;
}
