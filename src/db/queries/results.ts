/**
 * What a worker writes about jobs it holds besides their results (those are
 * the finish family's, finish.ts): heartbeats and releases, and the read of
 * where its jobs stand after a write whose answer was lost. Each write takes a
 * batch and is fenced by the lease (job id, attempt, lease number, worker id,
 * `status = 'running'`): a lease that was reclaimed changes nothing, and the
 * rows not returned say which.
 *
 * The fence finds the batch's rows by primary key and checks each lease key in
 * a hashed array (see LEASE_FENCE); per-job values are read by position. The
 * statements are sent unnamed so that PostgreSQL plans each with the batch's ids.
 */
import type { JobStatus } from '../../job/job.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { wakeUpQueuesSql } from '../wake-up.js';
import {
  AT,
  LEASE_FENCE,
  type LeasedJob,
  leaseKey,
  leaseKeys,
  leaseParams,
  newestLeasePerJob,
} from './job-row.js';
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

/**
 * What a heartbeat found: the lease keys still held, those of them whose
 * cancel was requested, and those it could not renew because another
 * transaction held their rows locked (see {@link ResultQueries.renewLocked}).
 */
export interface HeartbeatResult {
  held: Set<string>;
  cancelRequested: Set<string>;
  locked: Set<string>;
}

type Pool = Queryable;

/** The heartbeat, release and lease-state statements of a worker. */
export class ResultQueries {
  readonly #heartbeat: Statement;
  readonly #renewLocked: Statement;
  readonly #release: Statement;
  readonly #leaseStates: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    const { jobs, statement } = names;
    this.#channel = names.channel;
    // A row another transaction has locked (a child's enqueue that names the
    // job as its parent, maybe in the job's own transactional handler) is
    // skipped rather than waited for, so it never holds up the renewal of the
    // worker's other leases; it is renewed by a later beat. The leases held
    // are read from the statement's snapshot, skipped rows included.
    this.#heartbeat = statement(
      'heartbeat',
      `WITH renewed AS (
         UPDATE ${jobs} j SET locked_at = now()
         WHERE j.id IN (SELECT j.id FROM ${jobs} j ${LEASE_FENCE} FOR UPDATE SKIP LOCKED)
         RETURNING j.id
       )
       SELECT j.id, j.lease_seq, j.cancel_requested_at IS NOT NULL AS cancel_requested,
              j.id IN (SELECT id FROM renewed) AS renewed
       FROM ${jobs} j ${LEASE_FENCE}`,
    );
    // The renewal of leases a beat skipped because their rows were locked: it
    // waits for the locks, so that the lease is renewed the moment the other
    // transaction ends, before a sweep could find it stale. The rows are
    // locked first (the array is built before the update reads a row), then
    // stamped with the time of the write: now(), the statement's start, or a
    // time taken before the wait, would already be stale after a wait longer
    // than the visibility timeout.
    this.#renewLocked = statement(
      'heartbeat_locked',
      `UPDATE ${jobs} j SET locked_at = pg_catalog.clock_timestamp()
       WHERE j.id = ANY(ARRAY(SELECT j.id FROM ${jobs} j ${LEASE_FENCE} FOR UPDATE))`,
    );
    // Gives jobs back without charging the attempt, and wakes other workers for
    // them; a job whose cancel was requested ends `cancelled` instead, charged
    // when its handler had started ($5), as every cancel of a running job is.
    // run_at is kept, so a given-back job keeps its place among its priority's
    // (and its key's) due jobs instead of going behind every job due by now.
    this.#release = statement(
      'release',
      `WITH released AS (
         UPDATE ${jobs} j
         SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'queued' ELSE 'cancelled' END,
             locked_at = NULL, locked_by = NULL,
             attempts = CASE WHEN j.cancel_requested_at IS NOT NULL AND ($5::bool[])[${AT}]
                             THEN j.attempts ELSE j.attempts - 1 END,
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
    const { rows } = await run<{
      id: string;
      lease_seq: string;
      cancel_requested: boolean;
      renewed: boolean;
    }>(pool, this.#heartbeat, leaseParams(newestLeasePerJob(jobs), workerId));
    return {
      held: leaseKeys(rows),
      cancelRequested: leaseKeys(rows.filter((r) => r.cancel_requested)),
      locked: leaseKeys(rows.filter((r) => !r.renewed)),
    };
  }

  /**
   * Renews the leases of `jobs` whose rows another transaction holds locked,
   * waiting for those locks (up to the statement's deadline).
   *
   * @throws {DatabaseError} from the database, or the deadline.
   */
  async renewLocked(pool: Pool, jobs: readonly LeasedJob[], workerId: string): Promise<void> {
    await run(pool, this.#renewLocked, leaseParams(newestLeasePerJob(jobs), workerId));
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
