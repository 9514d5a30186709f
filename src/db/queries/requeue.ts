/**
 * Requeue: dead, failed and cancelled jobs back to `queued` with attempts 0,
 * run_at now, last_error and the start deadline cleared (a person putting a
 * job back wants it run, an expired one included), waking workers for their
 * queues.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import { wakeUpQueuesSql } from '../wake-up.js';
import { filteredChangeValues, type JobFilter } from './inspect.js';
import type { SchemaNames } from './schema-names.js';

/** Statuses a job can be requeued from. */
export const REQUEUABLE_STATUSES = ['dead', 'failed', 'cancelled'] as const;

/** The requeue statement. */
export class RequeueQueries {
  readonly #requeue: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    this.#channel = names.channel;
    this.#requeue = names.statement(
      'requeue',
      `WITH requeued AS (
         UPDATE ${names.jobs}
         SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL,
             cancel_requested_at = NULL, start_by = NULL
         WHERE status IN ('dead', 'failed', 'cancelled')
           AND status = ANY(COALESCE($1::text[], ARRAY['dead', 'failed']))
           AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
           AND ($3::text[] IS NULL OR kind = ANY($3::text[]))
           AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
           AND ($6::text[] IS NULL OR tags @> $6::text[])
         RETURNING queue
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
    const { rows } = await run<{ requeued: number }>(
      db,
      this.#requeue,
      filteredChangeValues(filter, this.#channel),
    );
    return rows[0]?.requeued ?? 0;
  }
}
