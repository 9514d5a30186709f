/**
 * What a worker writes about jobs it holds: successes, failures, heartbeats and
 * releases. Each statement takes a batch and is fenced by the lease (job id,
 * attempt, lease number, worker id, `status = 'running'`): a lease that was
 * reclaimed changes nothing, and the rows not returned say which.
 *
 * The fence finds the batch's rows by primary key and checks each lease key in
 * a hashed array (see LEASE_FENCE); per-job values are read by position. The
 * statements are sent unnamed so that PostgreSQL plans each with the batch's ids.
 */
import type pg from 'pg';
import type { JobStatus } from '../../job/job.js';
import { run, type Statement } from '../executor.js';
import { wakeUpQueuesSql } from '../wake-up.js';
import { appendAttemptError } from './attempt-errors.js';
import {
  AT,
  LEASE_FENCE,
  type LeasedJob,
  leaseKey,
  leaseKeys,
  leaseParams,
  newestLeasePerJob,
  RESULT_FENCE,
  runFenced,
} from './job-row.js';

/** Whether the batch marks this row's failure permanent. */
const PERMANENT = `($5::bool[])[${AT}]`;

import type { SchemaNames } from './schema-names.js';

/** The columns a {@link LeaseState} is read from. */
export const LEASE_STATE_COLUMNS = `id, lease_seq, status, locked_by, queue,
       GREATEST(0, EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS retry_delay_ms`;

/** A row of {@link LEASE_STATE_COLUMNS}. */
export interface LeaseStateRow {
  id: string;
  lease_seq: string;
  status: JobStatus;
  locked_by: string | null;
  queue: string;
  retry_delay_ms: number;
}

/** A lease state from its row. */
export function leaseStateOf(r: LeaseStateRow): LeaseState {
  return {
    id: r.id,
    leaseSeq: r.lease_seq,
    status: r.status,
    lockedBy: r.locked_by,
    queue: r.queue,
    retryDelayMs: r.retry_delay_ms,
  };
}

/** What happens to a succeeded job's row. */
export type SuccessPolicy = 'delete' | 'keep' | 'archive';

/** A failure to record: the error text and whether it is permanent (no retry). */
export interface FailedJob extends LeasedJob {
  error: string;
  permanent: boolean;
  /** Milliseconds until the retry, from the kind's backoff; undefined for the default rule. */
  retryDelayMs?: number | undefined;
  /** Set when the handler snoozed the job (see snooze.ts); `fail` itself ignores it. */
  snoozeDelayMs?: number | undefined;
}

/** What `fail` wrote for one job. */
export interface FailureOutcome extends LeasedJob {
  status: 'queued' | 'failed' | 'dead';
  queue: string;
  /** Milliseconds until the retry is due (0 unless requeued with backoff). */
  retryDelayMs: number;
}

/** Where a job of a lease stands now, read after a write whose answer was lost. */
export interface LeaseState {
  id: string;
  leaseSeq: string;
  status: JobStatus;
  lockedBy: string | null;
  queue: string;
  retryDelayMs: number;
}

/** A lease to give back; `started`: its handler ran (a cancelled one then keeps its attempt). */
export interface ReleasedJob extends LeasedJob {
  started?: boolean;
}

/** What a heartbeat found: the lease keys still held, and those of them whose cancel was requested. */
export interface HeartbeatResult {
  held: Set<string>;
  cancelRequested: Set<string>;
}

type Pool = Pick<pg.Pool, 'query'>;

/** The statements a worker writes results with. */
export class ResultQueries {
  readonly #complete: Record<SuccessPolicy, Statement>;
  readonly #fail: Statement;
  readonly #heartbeat: Statement;
  readonly #release: Statement;
  readonly #leaseStates: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    const { jobs, statement } = names;
    this.#channel = names.channel;
    this.#complete = {
      delete: statement(
        'complete_delete',
        `DELETE FROM ${jobs} j
         ${RESULT_FENCE}
         RETURNING j.id, j.lease_seq`,
      ),
      keep: statement(
        'complete_keep',
        `UPDATE ${jobs} j
         SET status = 'succeeded', locked_at = NULL, locked_by = NULL, finished_at = now()
         ${RESULT_FENCE}
         RETURNING j.id, j.lease_seq`,
      ),
      archive: statement(
        'complete_archive',
        `WITH done AS (
           DELETE FROM ${jobs} j
           ${RESULT_FENCE}
           RETURNING j.*
         )
         INSERT INTO ${names.archive}
           (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
            locked_at, last_error, created_at, locked_by, lease_seq, visibility_timeout_ms, finished_at,
            max_attempts_default, errors, trace_context)
         SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts, max_attempts,
                NULL, last_error, created_at, NULL, lease_seq, visibility_timeout_ms, now(),
                max_attempts_default, errors, trace_context
         FROM done
         RETURNING id, lease_seq`,
      ),
    };
    // Backoff with jitter on the database clock, dead letter after max_attempts,
    // 'failed' for a permanent error. The exponent is clamped at
    // BACKOFF_MAX_EXPONENT (job/backoff.ts) so power() stays finite. A delay in
    // $6 (the kind's backoff, computed by the worker) replaces the rule; NULL keeps it.
    // The attempt joins the job's history (appendAttemptError).
    this.#fail = statement(
      'fail',
      `UPDATE ${jobs} j
       SET status = CASE WHEN ${PERMANENT} THEN 'failed'
                         WHEN j.attempts >= j.max_attempts THEN 'dead'
                         ELSE 'queued' END,
           locked_at = NULL, locked_by = NULL, last_error = ($4::text[])[${AT}],
           run_at = CASE WHEN ${PERMANENT} OR j.attempts >= j.max_attempts THEN j.run_at
                         ELSE now() + COALESCE(($6::float8[])[${AT}] * interval '1 millisecond',
                                               least(interval '1 second' * power(2, least(j.attempts, 12)),
                                                     interval '1 hour') * (0.5 + random() * 0.5)) END,
           finished_at = CASE WHEN ${PERMANENT} OR j.attempts >= j.max_attempts THEN now() END,
           errors = ${appendAttemptError(`($4::text[])[${AT}]`, '$3')}
       ${RESULT_FENCE}
       RETURNING j.id, j.attempts, j.lease_seq, j.status, j.queue,
                 GREATEST(0, EXTRACT(EPOCH FROM j.run_at - now()) * 1000)::float8 AS retry_delay_ms`,
    );
    this.#heartbeat = statement(
      'heartbeat',
      `UPDATE ${jobs} j SET locked_at = now()
       ${LEASE_FENCE}
       RETURNING j.id, j.lease_seq, j.cancel_requested_at IS NOT NULL AS cancel_requested`,
    );
    // Gives jobs back without charging the attempt, and wakes other workers for
    // them; a job whose cancel was requested ends `cancelled` instead, charged
    // when its handler had started ($5), as every cancel of a running job is.
    this.#release = statement(
      'release',
      `WITH released AS (
         UPDATE ${jobs} j
         SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'queued' ELSE 'cancelled' END,
             locked_at = NULL, locked_by = NULL,
             attempts = CASE WHEN j.cancel_requested_at IS NOT NULL AND ($5::bool[])[${AT}]
                             THEN j.attempts ELSE j.attempts - 1 END,
             run_at = CASE WHEN j.cancel_requested_at IS NULL THEN now() ELSE j.run_at END,
             finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END
         ${LEASE_FENCE}
         RETURNING j.id, j.lease_seq, j.queue, j.status
       ), woken AS (${wakeUpQueuesSql(names.wakeUp, '$4', 'release', "released WHERE status = 'queued'")})
       SELECT r.id, r.lease_seq, r.status, (SELECT count(*) FROM woken) AS woken FROM released r`,
    );
    this.#leaseStates = statement(
      'lease_states',
      `SELECT ${LEASE_STATE_COLUMNS} FROM ${jobs} WHERE id = ANY($1::bigint[])`,
    );
  }

  /**
   * Ends succeeded jobs by the success policy (deleted, kept as `succeeded`, or
   * moved to the archive); returns the lease keys whose lease still held.
   */
  async complete(
    pool: Pool,
    jobs: readonly LeasedJob[],
    workerId: string,
    policy: SuccessPolicy,
  ): Promise<Set<string>> {
    return runFenced(pool, this.#complete[policy], jobs, workerId);
  }

  /** Records failures under the lease (retry with backoff, dead letter, or failed); returns what each became. */
  async fail(pool: Pool, jobs: readonly FailedJob[], workerId: string): Promise<FailureOutcome[]> {
    const batch = newestLeasePerJob(jobs);
    const { rows } = await run<{
      id: string;
      attempts: number;
      lease_seq: string;
      status: FailureOutcome['status'];
      queue: string;
      retry_delay_ms: number;
    }>(pool, this.#fail, [
      ...leaseParams(batch, workerId),
      batch.map((j) => j.error),
      batch.map((j) => j.permanent),
      batch.map((j) => j.retryDelayMs ?? null),
    ]);
    return rows.map((r) => ({
      id: r.id,
      attempts: r.attempts,
      leaseSeq: r.lease_seq,
      status: r.status,
      queue: r.queue,
      retryDelayMs: r.retry_delay_ms,
    }));
  }

  /** Refreshes `locked_at` of leased jobs; returns the lease keys still held. */
  async heartbeat(pool: Pool, jobs: readonly LeasedJob[], workerId: string): Promise<Set<string>> {
    return (await this.beat(pool, jobs, workerId)).held;
  }

  /**
   * Refreshes `locked_at` of leased jobs; returns the lease keys still held,
   * and among them those whose cancel was requested (the safety net of a
   * cancel message that did not arrive).
   */
  async beat(pool: Pool, jobs: readonly LeasedJob[], workerId: string): Promise<HeartbeatResult> {
    const { rows } = await run<{ id: string; lease_seq: string; cancel_requested: boolean }>(
      pool,
      this.#heartbeat,
      leaseParams(newestLeasePerJob(jobs), workerId),
    );
    return { held: leaseKeys(rows), cancelRequested: leaseKeys(rows.filter((r) => r.cancel_requested)) };
  }

  /**
   * Gives leased jobs back to `queued` without charging the attempt (a job
   * whose cancel was requested ends `cancelled`); returns the released lease keys.
   */
  async release(pool: Pool, jobs: readonly ReleasedJob[], workerId: string): Promise<Set<string>> {
    return new Set((await this.releaseWithStatus(pool, jobs, workerId)).keys());
  }

  /**
   * Gives leased jobs back like {@link release}; returns what each released
   * lease key ended as: `queued`, or `cancelled` when its cancel was requested.
   */
  async releaseWithStatus(
    pool: Pool,
    jobs: readonly ReleasedJob[],
    workerId: string,
  ): Promise<Map<string, 'queued' | 'cancelled'>> {
    const batch = newestLeasePerJob(jobs);
    const { rows } = await run<{ id: string; lease_seq: string; status: 'queued' | 'cancelled' }>(
      pool,
      this.#release,
      [...leaseParams(batch, workerId), this.#channel, batch.map((j) => j.started === true)],
    );
    return new Map(rows.map((r) => [leaseKey({ id: r.id, leaseSeq: r.lease_seq }), r.status]));
  }

  /**
   * Where the given jobs stand now (absent ones are left out). Read after a
   * result write whose answer was lost, to tell a write that committed from a
   * lease that was reclaimed.
   */
  async leaseStates(pool: Pool, ids: readonly string[]): Promise<LeaseState[]> {
    const { rows } = await run<LeaseStateRow>(pool, this.#leaseStates, [ids]);
    return rows.map(leaseStateOf);
  }
}
