/**
 * What a handler leaves on its job beside its status: its result (the return
 * value), its progress (the last value reported) and its log (the newest
 * lines). The rules and bounds are here; the SQL is in db/queries/progress.ts
 * and the finish statement. Pure: no I/O.
 */
import type { SuccessPolicy } from '../db/queries/finish.js';
import { ValidationError } from '../errors.js';
import { truncated } from '../job/failure.js';
import { assertStorableString, serializePayload } from '../job/job.js';

/** Largest result stored by default, in bytes of JSON (worker option `maxResultBytes`): 1 MiB. */
export const DEFAULT_MAX_RESULT_BYTES = 1_048_576;

/** Largest progress value, in bytes of JSON. */
export const MAX_PROGRESS_BYTES = 4096;

/** Log lines kept per job: the newest. */
export const MAX_LOG_LINES = 50;

/** Longest log line kept, in characters; a longer one is cut and marked `… [truncated]`. */
export const MAX_LOG_LINE_CHARS = 1000;

/** One log line as stored with its job. */
export interface JobLogLine {
  /** When the line was written (database clock). */
  at: Date;
  line: string;
}

/**
 * The JSON text of a handler's return value, to store as the job's `result`.
 *
 * @throws {ValidationError} naming `result` when it is not JSON or longer than `maxBytes` bytes.
 */
export function serializeResult(value: unknown, maxBytes: number): string {
  return bounded(serializePayload(value, 'result'), 'result', maxBytes, 'maxResultBytes');
}

/**
 * What a success writes beside its status: the handler's return value as the
 * result, and the job's own policy. Undefined when there is nothing but the
 * worker's policy to write (the handler returned nothing), so such a success
 * costs what it always did.
 *
 * When the job's policy (its own, else the worker's) keeps the row, the result
 * is stored on it. Under `delete` the result is kept only for the job's
 * children (their `parents()`); a value that cannot be stored (not JSON, or
 * larger than `maxResultBytes`) is then left out instead of failing a job that
 * stores nothing of its own.
 *
 * @throws {ValidationError} naming `result` (see {@link serializeResult}) when the row keeps it.
 */
export function successToWrite(
  value: unknown,
  jobPolicy: SuccessPolicy | undefined,
  workerPolicy: SuccessPolicy,
  maxResultBytes: number,
): { result?: string | undefined; onSuccess?: SuccessPolicy | undefined } | undefined {
  if (value === undefined) return jobPolicy ? { onSuccess: jobPolicy } : undefined;
  if ((jobPolicy ?? workerPolicy) !== 'delete')
    return { result: serializeResult(value, maxResultBytes), onSuccess: jobPolicy };
  let result: string;
  try {
    result = serializeResult(value, maxResultBytes);
  } catch {
    return jobPolicy ? { onSuccess: jobPolicy } : undefined;
  }
  return { result, onSuccess: jobPolicy };
}

/**
 * The JSON text of a progress value.
 *
 * @throws {ValidationError} naming `progress` when it is not JSON, undefined, or longer than 4 KiB.
 */
export function serializeProgress(value: unknown): string {
  if (value === undefined) throw new ValidationError('progress', 'must be a JSON value, not undefined');
  return bounded(
    serializePayload(value, 'progress'),
    'progress',
    MAX_PROGRESS_BYTES,
    `${MAX_PROGRESS_BYTES}`,
  );
}

/**
 * A log line as stored: cut after {@link MAX_LOG_LINE_CHARS} characters.
 *
 * @throws {ValidationError} naming `line` when it is not a string, or holds a
 *   NUL character or a lone surrogate (PostgreSQL's text cannot store them).
 */
export function logLine(line: unknown): string {
  if (typeof line !== 'string') throw new ValidationError('line', 'must be a string');
  assertStorableString(line, 'line');
  return truncated(line, MAX_LOG_LINE_CHARS);
}

/** The stored `logs` column as lines (null: none). */
export function toLogLines(value: unknown): JobLogLine[] {
  if (!Array.isArray(value)) return [];
  return value.map((e: { at?: string; line?: string }) => ({
    at: new Date(e.at ?? 0),
    line: String(e.line ?? ''),
  }));
}

function bounded(json: string, field: string, maxBytes: number, limit: string): string {
  if (json.length * 3 <= maxBytes) return json;
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) throw new ValidationError(field, `is ${bytes} bytes of JSON, more than ${limit}`);
  return json;
}
