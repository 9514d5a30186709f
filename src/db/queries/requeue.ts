/**
 * Requeue: dead, failed and cancelled jobs back to `queued` with attempts 0,
 * run_at now, last_error and the start deadline cleared (a person putting a
 * job back wants it run, an expired one included), waking workers for their
 * queues.
 */
import type { Queryable } from '../executor.js';
import { wakeUpQueuesSql } from '../wake-up.js';
import { FILTER_MATCH, FilteredChange } from './filtered-change.js';
import type { JobFilter } from './inspect.js';
import type { SchemaNames } from './schema-names.js';

/** Statuses a job can be requeued from. */
export const REQUEUABLE_STATUSES = ['dead', 'failed', 'cancelled'] as const;

/** The requeue statement. */
export class RequeueQueries {
  readonly #requeue: FilteredChange;

  constructor(names: SchemaNames) {
    this.#requeue = new FilteredChange(
      names,
      'requeue',
      `WITH requeued AS (
         UPDATE ${names.jobs} j
         SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL,
             cancel_requested_at = NULL, start_by = NULL
         WHERE j.status IN ('dead', 'failed', 'cancelled')
           AND j.status = ANY(COALESCE($1::text[], ARRAY['dead', 'failed']))
           AND ${FILTER_MATCH}
         RETURNING j.queue
       ), woken AS (${wakeUpQueuesSql(names.wakeUp, '$5', 'requeue', 'requeued')})
       SELECT (SELECT count(*) FROM requeued)::int AS requeued, (SELECT count(*) FROM woken) AS woken`,
    );
  }

  /**
   * Requeues the jobs matching `filter` (every given field must match); without
   * a status, dead and failed ones (cancelled jobs only when asked for).
   * Returns how many.
   */
  async requeue(db: Queryable, filter: JobFilter): Promise<number> {
    const [counts] = await this.#requeue.run<{ requeued: number }>(db, filter);
    return counts?.requeued ?? 0;
  }
}
