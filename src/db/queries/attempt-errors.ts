/**
 * The SQL that appends a failed attempt to a job's history (the `errors`
 * column, see job/attempt-history.ts), shared by the failure and sweep
 * statements so both write the same shape.
 */
import { MAX_ATTEMPT_ERROR_CHARS, MAX_ATTEMPT_ERRORS } from '../../job/attempt-history.js';

/**
 * An expression of the updated row `j` (its values before the update): its
 * `errors` array with `{attempt, error, at, worker}` of the current attempt
 * appended (its text cut after {@link MAX_ATTEMPT_ERROR_CHARS} characters),
 * cut to the newest {@link MAX_ATTEMPT_ERRORS} entries.
 *
 * @param error - SQL expression of the error text (a parameter reference).
 * @param worker - SQL expression of the worker id (a parameter reference or a column).
 */
export function appendAttemptError(error: string, worker: string): string {
  const text = `left(${error}, ${MAX_ATTEMPT_ERROR_CHARS})
                 || CASE WHEN length(${error}) > ${MAX_ATTEMPT_ERROR_CHARS} THEN '… [truncated]' ELSE '' END`;
  // jsonpath's lax mode takes `last-19` before the first element as the first.
  return `jsonb_path_query_array(
             COALESCE(j.errors, '[]'::jsonb)
               || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'error', ${text},
                                                       'at', now(), 'worker', ${worker})),
             '$[last-${MAX_ATTEMPT_ERRORS - 1} to last]')`;
}
