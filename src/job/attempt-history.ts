/**
 * The history of a job's failed attempts, as stored with the job (the `errors`
 * column) and as operators read it. Pure: no I/O.
 */

/** Failed attempts kept per job: the newest this many (the SQL that appends keeps the same). */
export const MAX_ATTEMPT_ERRORS = 20;

/**
 * Longest error text kept per entry, in characters; longer ones are cut with
 * `… [truncated]` (the whole text of the last failure stays in `lastError`).
 * Bounds the history at about 80 KB however long the stack traces.
 */
export const MAX_ATTEMPT_ERROR_CHARS = 4096;

/** One failed attempt of a job. */
export interface AttemptError {
  /** The attempt that failed (1 for the first run; counting restarts at a requeue). */
  attempt: number;
  /**
   * What the attempt failed with, as `lastError` holds it, cut after
   * {@link MAX_ATTEMPT_ERROR_CHARS} characters (`reclaimed: visibility timeout`
   * for a lease the sweeper reclaimed).
   */
  error: string;
  /** When the failure was recorded (database clock). */
  at: Date;
  /** Id of the worker that held the attempt's lease; null when unknown (a row set running by plain SQL). */
  workerId: string | null;
}

/** An entry as stored in the `errors` JSON array. */
interface StoredAttemptError {
  attempt?: unknown;
  error?: unknown;
  at?: unknown;
  worker?: unknown;
}

/** The history of a selected row's `errors` column, oldest first; empty when the job never failed. */
export function toAttemptErrors(stored: unknown): AttemptError[] {
  if (!Array.isArray(stored)) return [];
  return stored.map((entry: StoredAttemptError) => ({
    attempt: Number(entry.attempt),
    error: String(entry.error),
    at: new Date(String(entry.at)),
    workerId: typeof entry.worker === 'string' ? entry.worker : null,
  }));
}
