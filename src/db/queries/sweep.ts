/**
 * The sweeper's statements: running jobs whose lease outlived their visibility
 * timeout go back to `queued`, or to `dead` when out of attempts, so a job
 * that kills its worker every time does not loop forever; one whose cancel
 * was requested ends `cancelled`. The reclaimed attempt joins the job's
 * history of failed attempts. Queued jobs past their start deadline end
 * `cancelled`, expired.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import { wakeUpQueuesSql } from '../wake-up.js';
import { appendAttemptError } from './attempt-errors.js';
import type { SchemaNames } from './schema-names.js';

/** The sweep statements. */
export class SweepQueries {
  readonly #sweep: Statement;
  readonly #expire: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    this.#channel = names.channel;
    this.#sweep = names.statement(
      'sweep',
      `WITH expired AS (
         SELECT id FROM ${names.jobs}
         WHERE status = 'running'
           AND locked_at < now() - COALESCE(visibility_timeout_ms, $1) * interval '1 millisecond'
         ORDER BY locked_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), swept AS (
         UPDATE ${names.jobs} j
         SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                           WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'queued' END,
             locked_at = NULL, locked_by = NULL, last_error = 'reclaimed: visibility timeout',
             finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
                                THEN now() END,
             errors = ${appendAttemptError("'reclaimed: visibility timeout'", 'j.locked_by')}
         WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
         RETURNING j.id, j.queue, j.status
       ), woken AS (${wakeUpQueuesSql(names.wakeUp, '$3', 'sweep', "swept WHERE status = 'queued'")})
       SELECT s.id, s.status, (SELECT count(*) FROM woken) AS woken FROM swept s`,
    );
    // Through the index of queued jobs with a deadline, oldest first. Fenced by
    // status = 'queued': a job claimed meanwhile (in time) is left to run. No
    // wake-up: nothing became claimable. to_char in UTC, so the text reads the
    // same whatever the session's time zone.
    this.#expire = names.statement(
      'sweep_expire',
      `WITH due AS (
         SELECT id FROM ${names.jobs}
         WHERE status = 'queued' AND start_by IS NOT NULL AND start_by < now()
         ORDER BY start_by
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       )
       UPDATE ${names.jobs} j
       SET status = 'cancelled', finished_at = now(),
           last_error = 'expired: not started by '
                        || to_char(j.start_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
       WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.status = 'queued'
       RETURNING j.id`,
    );
  }

  /**
   * Ends up to `limit` queued jobs whose start deadline (`start_by`) has
   * passed as `cancelled`, `last_error` `expired: not started by <start_by>`
   * (ISO 8601, UTC); returns how many. Run inside the sweeper's transaction.
   */
  async expire(db: Queryable, limit: number): Promise<number> {
    const { rows } = await run<{ id: string }>(db, this.#expire, [limit]);
    return rows.length;
  }

  /**
   * Reclaims up to `limit` jobs whose lease is older than their visibility
   * timeout (`defaultVisibilityTimeoutMs` for rows set running by plain SQL).
   * Run inside the sweeper's transaction, after it took the advisory lock.
   */
  async sweep(
    db: Queryable,
    defaultVisibilityTimeoutMs: number,
    limit: number,
  ): Promise<{ requeued: number; dead: number }> {
    const { rows } = await run<{ id: string; status: string }>(db, this.#sweep, [
      Math.round(defaultVisibilityTimeoutMs),
      limit,
      this.#channel,
    ]);
    // A job whose cancel was requested ends `cancelled`, counted in neither.
    const dead = rows.filter((r) => r.status === 'dead').length;
    return { requeued: rows.filter((r) => r.status === 'queued').length, dead };
  }
}
