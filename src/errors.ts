/**
 * Every error skiplock throws or reports is a {@link SkiplockError} with a stable
 * string `code`, so callers can branch on `err.code` rather than on message text.
 */
import { MAX_DELAY_MS } from './job/defaults.js';

/** Stable error codes. New codes may be added; existing ones never change meaning. */
export type SkiplockErrorCode =
  | 'VALIDATION'
  | 'UNKNOWN_KIND'
  | 'SCHEMA_VERSION'
  | 'JOB_TIMEOUT'
  | 'PERMANENT'
  | 'SHUTDOWN'
  | 'LEASE_LOST'
  | 'DATABASE'
  | 'CLOSED'
  | 'ALREADY_STARTED'
  | 'LISTENER'
  | 'DRAIN_LIMIT'
  | 'USAGE'
  | 'EMBEDDED_SERVER'
  | 'MISSING_DEPENDENCY'
  | 'CANCELLED'
  | 'SNOOZE'
  | 'BROKER'
  | 'JOB_NOT_FOUND'
  | 'WAIT_TIMEOUT';

/** Base class of every skiplock error. `cause` carries the underlying error, when any. */
export class SkiplockError extends Error {
  /** Stable machine-readable code. */
  readonly code: SkiplockErrorCode;

  constructor(code: SkiplockErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'SkiplockError';
    this.code = code;
  }
}

/**
 * Bad input to a public entry: an unknown option, a value of the wrong type or
 * range, a payload that is not JSON. Thrown before anything touches the database,
 * so nothing was written.
 */
export class ValidationError extends SkiplockError {
  /** Path of the offending field, such as `maxAttempts` or `payload.items[2]`. */
  readonly field: string;
  /** Why the value was refused. */
  readonly reason: string;

  constructor(field: string, reason: string) {
    super('VALIDATION', `invalid ${field}: ${reason}`);
    this.name = 'ValidationError';
    this.field = field;
    this.reason = reason;
  }
}

/** A worker claimed a job whose kind it has no handler for. Recorded as a retryable failure. */
export class UnknownKindError extends SkiplockError {
  readonly kind: string;

  constructor(kind: string) {
    super('UNKNOWN_KIND', `no handler for kind ${JSON.stringify(kind)} in this worker`);
    this.name = 'UnknownKindError';
    this.kind = kind;
  }
}

/** The database's skiplock schema is newer than this library (or a migration failed). */
export class SchemaVersionError extends SkiplockError {
  /** The newest schema version in the database (0: not migrated), when known. */
  readonly databaseVersion: number | undefined;
  /** The newest schema version this library knows. */
  readonly libraryVersion: number | undefined;

  constructor(
    message: string,
    options?: { cause?: unknown; databaseVersion?: number; libraryVersion?: number },
  ) {
    super('SCHEMA_VERSION', message, options);
    this.name = 'SchemaVersionError';
    this.databaseVersion = options?.databaseVersion;
    this.libraryVersion = options?.libraryVersion;
  }
}

/** A handler ran longer than `jobTimeoutMs`. Recorded as a retryable failure. */
export class JobTimeoutError extends SkiplockError {
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super('JOB_TIMEOUT', `job timed out after ${timeoutMs} ms`);
    this.name = 'JobTimeoutError';
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Throw from a handler to end the job as `failed` at once, without retry
 * (a permanent error). A person can still `requeue` it.
 *
 * @example
 * if (!order) throw new PermanentError(`order ${job.payload.orderId} does not exist`);
 */
export class PermanentError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PERMANENT', message, options);
    this.name = 'PermanentError';
  }
}

/**
 * Whether a thrown value is a {@link PermanentError}, also one from another copy
 * of this module (a handlers file loaded through tsx, a second install), which
 * `instanceof` does not recognise: by its name and stable code.
 */
export function isPermanentError(error: unknown): boolean {
  try {
    if (error instanceof PermanentError) return true;
    return (
      error instanceof Error &&
      error.name === 'PermanentError' &&
      (error as { code?: unknown }).code === 'PERMANENT'
    );
  } catch {
    // A Proxy whose traps throw is not a PermanentError.
    return false;
  }
}

/** The reason given to a handler's AbortSignal when its worker shuts down. */
export class ShutdownError extends SkiplockError {
  constructor() {
    super('SHUTDOWN', 'worker is shutting down; the job goes back to queued');
    this.name = 'ShutdownError';
  }
}

/** The reason given to a handler's AbortSignal when its lease was reclaimed by the sweeper. */
export class LeaseLostError extends SkiplockError {
  /** The job whose lease was lost. */
  readonly jobId: string;

  constructor(jobId: string) {
    super('LEASE_LOST', `lease of job ${jobId} was lost (reclaimed after the visibility timeout)`);
    this.name = 'LeaseLostError';
    this.jobId = jobId;
  }
}

/**
 * The reason given to a handler's AbortSignal when its job was cancelled
 * (`skiplock.cancel`). The attempt ends at once and the job ends `cancelled`,
 * never retried, whatever the handler returns or throws afterwards.
 */
export class CancelledError extends SkiplockError {
  /** The cancelled job. */
  readonly jobId: string;

  constructor(jobId: string) {
    super('CANCELLED', `job ${jobId} was cancelled`);
    this.name = 'CancelledError';
    this.jobId = jobId;
  }
}

/**
 * Throw from a handler to run the job again later without charging the
 * attempt: the job goes back to `queued` at `now() + delayMs` (database clock)
 * with `attempts` as before this run. A job whose cancel was requested ends
 * `cancelled` instead.
 *
 * @example
 * if (await rateLimited()) throw new SnoozeError(30_000); // again in 30 s
 */
export class SnoozeError extends SkiplockError {
  /** Milliseconds until the job is due again. */
  readonly delayMs: number;

  /**
   * @param delayMs - milliseconds until the job is due again: a number from 0 to 10,000 years.
   * @throws {ValidationError} (field `delayMs`) when it is negative, not finite, not a
   *   number, or longer than 10,000 years (a time the database cannot hold).
   */
  constructor(delayMs: number) {
    if (!isSnoozeDelay(delayMs)) {
      throw new ValidationError('delayMs', 'must be a finite number of milliseconds from 0 to 10,000 years');
    }
    super('SNOOZE', `snoozed for ${delayMs} ms`);
    this.name = 'SnoozeError';
    this.delayMs = delayMs;
  }
}

function isSnoozeDelay(delayMs: unknown): delayMs is number {
  return typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0 && delayMs <= MAX_DELAY_MS;
}

/**
 * The delay of a thrown {@link SnoozeError} (also one from another copy of
 * this module, recognised by name and code), or undefined for anything else.
 */
export function snoozeDelayMs(error: unknown): number | undefined {
  try {
    // Checked again: the field can be changed after the constructor checked it.
    if (error instanceof SnoozeError) return isSnoozeDelay(error.delayMs) ? error.delayMs : undefined;
    if (!(error instanceof Error) || error.name !== 'SnoozeError') return undefined;
    const { code, delayMs } = error as { code?: unknown; delayMs?: unknown };
    return code === 'SNOOZE' && isSnoozeDelay(delayMs) ? delayMs : undefined;
  } catch {
    return undefined;
  }
}

/** A database error, translated: `sqlState` is PostgreSQL's SQLSTATE when the server sent one. */
export class DatabaseError extends SkiplockError {
  readonly sqlState: string | undefined;

  constructor(message: string, sqlState: string | undefined, options?: { cause?: unknown }) {
    super('DATABASE', message, options);
    this.name = 'DatabaseError';
    this.sqlState = sqlState;
  }
}

/**
 * An optional package that a feature needs is not installed (the embedded
 * server, tsx, `@opentelemetry/api` for tracing). The message names the package
 * and the command that installs it.
 */
export class MissingDependencyError extends SkiplockError {
  /** The npm package to install. */
  readonly packageName: string;

  constructor(packageName: string, message: string, options?: { cause?: unknown }) {
    super('MISSING_DEPENDENCY', message, options);
    this.name = 'MissingDependencyError';
    this.packageName = packageName;
  }
}

/** `waitFor` was called for a job that does not exist (in the jobs table or the archive). */
export class JobNotFoundError extends SkiplockError {
  /** The id asked for. */
  readonly jobId: string;

  constructor(jobId: string) {
    super('JOB_NOT_FOUND', `job ${jobId} does not exist`);
    this.name = 'JobNotFoundError';
    this.jobId = jobId;
  }
}

/** `waitFor` gave up: the job did not reach a final status within `timeoutMs`. */
export class WaitTimeoutError extends SkiplockError {
  /** The job waited for. */
  readonly jobId: string;
  /** How long the wait lasted, in milliseconds. */
  readonly timeoutMs: number;

  constructor(jobId: string, timeoutMs: number) {
    super('WAIT_TIMEOUT', `job ${jobId} did not reach a final status within ${timeoutMs} ms`);
    this.name = 'WaitTimeoutError';
    this.jobId = jobId;
    this.timeoutMs = timeoutMs;
  }
}
