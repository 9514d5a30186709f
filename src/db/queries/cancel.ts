/**
 * Cancel: waiting and queued jobs end `cancelled` at once (a waiting job's
 * children that said 'cancel' with it, by the table's triggers); running ones are flagged
 * (`cancel_requested_at`) and their holders told by a control message. The
 * worker's finish statement (finish.ts) then ends such a job `cancelled`,
 * fenced by its lease, whatever its handler returned.
 */
import type pg from 'pg';
import type { Queryable, Statement } from '../executor.js';
import { FILTER_MATCH, FilteredChange } from './filtered-change.js';
import type { JobFilter } from './inspect.js';
import { LEASE_FENCE, type LeasedJob, runFenced } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** Statuses a job can be cancelled from. */
export const CANCELLABLE_STATUSES = ['waiting', 'queued', 'running'] as const;

/** One of {@link CANCELLABLE_STATUSES}. */
export type CancellableStatus = (typeof CANCELLABLE_STATUSES)[number];

/** What a cancel did. */
export interface CancelCounts {
  /** Queued jobs that are now `cancelled`. */
  cancelled: number;
  /** Running jobs whose holder was asked to abort them; each ends `cancelled` when it stops. */
  running: number;
}

/** The cancel statements. */
export class CancelQueries {
  readonly #cancel: FilteredChange;
  readonly #requested: Statement;

  constructor(names: SchemaNames) {
    const { jobs, statement } = names;
    // One statement for both: a job that starts running between a read and a
    // write cannot slip through. The control message goes out on commit.
    this.#cancel = new FilteredChange(
      names,
      'cancel',
      `WITH hit AS (
         UPDATE ${jobs} j
         SET status = CASE WHEN j.status IN ('waiting', 'queued') THEN 'cancelled' ELSE j.status END,
             finished_at = CASE WHEN j.status IN ('waiting', 'queued') THEN now() ELSE j.finished_at END,
             cancel_requested_at = COALESCE(j.cancel_requested_at, now())
         WHERE j.status IN ('waiting', 'queued', 'running')
           AND j.status = ANY(COALESCE($1::text[], ARRAY['waiting', 'queued', 'running']))
           AND ${FILTER_MATCH}
         RETURNING j.id, j.status
       ), told AS (
         SELECT ${names.control}($5, 'cancel', NULL, array_agg(id)) FROM hit
         WHERE status = 'running' HAVING count(*) > 0
       )
       SELECT count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled,
              count(*) FILTER (WHERE status = 'running')::int AS running,
              (SELECT count(*) FROM told) AS told
       FROM hit`,
    );
    // What a worker reads when a cancel message names jobs it holds: the
    // message is a hint (any role can send one), the row's flag is the request.
    this.#requested = statement(
      'cancel_requested',
      `SELECT j.id, j.lease_seq FROM ${jobs} j
       ${LEASE_FENCE} AND j.cancel_requested_at IS NOT NULL`,
    );
  }

  /**
   * Cancels the queued and running jobs matching `filter` (every given field
   * must match; `status` narrows to queued or running ones).
   */
  async cancel(db: Queryable, filter: JobFilter): Promise<CancelCounts> {
    const [counts] = await this.#cancel.run<CancelCounts>(db, filter);
    return { cancelled: counts?.cancelled ?? 0, running: counts?.running ?? 0 };
  }

  /**
   * Of these held jobs (fenced by the lease), the lease keys of those whose
   * cancel was requested. Reads only.
   */
  async requested(
    pool: Pick<pg.Pool, 'query'>,
    jobs: readonly LeasedJob[],
    workerId: string,
  ): Promise<Set<string>> {
    return runFenced(pool, this.#requested, jobs, workerId);
  }
}
