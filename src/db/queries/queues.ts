/**
 * The queues table: pause and resume a queue, and list queues with their
 * state and limits. A queue without a row is an ordinary, running queue; the claim skips
 * paused ones (see claim.ts).
 */
import { type Queryable, run, type Statement } from '../executor.js';
import { LIMIT_COLUMNS, type LimitsRow, limitsOf, type QueueLimits } from './queue-limits.js';
import type { SchemaNames } from './schema-names.js';

/** A queue as operators see it. */
export interface QueueInfo {
  /** The queue's name. */
  name: string;
  /** Whether workers skip it when they claim. */
  paused: boolean;
  /** When it was paused (database clock); null while it runs. */
  pausedAt: Date | null;
  /** Jobs waiting in it (`queued`, due or not). */
  queued: number;
  /** Jobs of it held by workers now (`running`, buffered ones included). */
  running: number;
  /** Its concurrency and rate limits (null: none). */
  limits: QueueLimits;
}

/**
 * Below this many finished jobs in the table, queues() finds every queue that
 * holds only finished jobs; above, it takes them from the planner's statistics.
 */
export const QUEUE_NAMES_EXACT_LIMIT = 10_000;

/** The queue statements. */
export class QueueQueries {
  readonly #pause: Statement;
  readonly #resume: Statement;
  readonly #list: Statement;
  readonly #schema: string;
  readonly #paused: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    const { statement, queues, jobs } = names;
    this.#channel = names.channel;
    // A paused queue keeps the time it was first paused.
    this.#pause = statement(
      'queue_pause',
      `WITH prior AS (SELECT paused FROM ${queues} WHERE name = $1),
       saved AS (
         INSERT INTO ${queues} AS q (name, paused, paused_at, updated_at) VALUES ($1, true, now(), now())
         ON CONFLICT (name) DO UPDATE SET paused = true, paused_at = COALESCE(q.paused_at, now()), updated_at = now()
         RETURNING q.name
       ), told AS (SELECT ${names.wakeUp}($2, 'pause', $1, 0) FROM saved)
       SELECT NOT COALESCE((SELECT paused FROM prior), false) AS changed, (SELECT count(*) FROM told) AS told`,
    );
    this.#resume = statement(
      'queue_resume',
      `WITH resumed AS (
         UPDATE ${queues} SET paused = false, paused_at = NULL, updated_at = now()
         WHERE name = $1 AND paused
         RETURNING name
       ), told AS (SELECT ${names.wakeUp}($2, 'resume', name, 0) FROM resumed)
       SELECT EXISTS (SELECT FROM resumed) AS changed, (SELECT count(*) FROM told) AS told`,
    );
    // Index-backed at any volume: queued and running counts through their
    // partial indexes. Queues that hold only finished jobs are found among the
    // newest $1 finished rows while there are fewer than $1 of them; beyond
    // that, from the planner's statistics of jobs.queue (most common values
    // and histogram bounds, refreshed by ANALYZE), so a rare one may be
    // missing and a gone one listed with zero counts until the next ANALYZE.
    this.#list = statement(
      'queue_list',
      `WITH finished AS (
         SELECT queue FROM ${jobs} WHERE finished_at IS NOT NULL LIMIT $1
       ), c AS (
         SELECT queue, sum(queued) AS queued, sum(running) AS running
         FROM (SELECT queue, count(*) AS queued, 0 AS running FROM ${jobs} WHERE status = 'queued' GROUP BY queue
               UNION ALL
               SELECT queue, 0, count(*) FROM ${jobs} WHERE locked_at IS NOT NULL AND status = 'running'
               GROUP BY queue) counts
         GROUP BY queue
       ), n (name) AS (
         SELECT name FROM ${queues}
         UNION SELECT queue FROM c
         UNION SELECT queue FROM finished WHERE (SELECT count(*) FROM finished) < $1
         UNION SELECT pg_catalog.unnest(pg_catalog.array_cat(s.most_common_vals::text::text[],
                                                              s.histogram_bounds::text::text[]))
               FROM pg_catalog.pg_stats s
               WHERE s.schemaname = $2 AND s.tablename = 'jobs' AND s.attname = 'queue'
                 AND (SELECT count(*) FROM finished) >= $1
       )
       SELECT n.name, COALESCE(q.paused, false) AS paused, q.paused_at,
              COALESCE(c.queued, 0)::int AS queued, COALESCE(c.running, 0)::int AS running,
              ${LIMIT_COLUMNS}
       FROM n
       LEFT JOIN ${queues} q ON q.name = n.name
       LEFT JOIN c ON c.queue = n.name
       WHERE n.name IS NOT NULL
       ORDER BY n.name`,
    );
    this.#schema = names.schema;
    this.#paused = statement(
      'queue_paused',
      `SELECT name FROM ${queues} WHERE name = ANY($1::text[]) AND paused`,
    );
  }

  /** Pauses `queue` and tells workers; returns false when it was paused already. */
  async pause(db: Queryable, queue: string): Promise<boolean> {
    const { rows } = await run<{ changed: boolean }>(db, this.#pause, [queue, this.#channel]);
    return rows[0]?.changed ?? false;
  }

  /** Resumes `queue` and wakes workers; returns false when it was not paused. */
  async resume(db: Queryable, queue: string): Promise<boolean> {
    const { rows } = await run<{ changed: boolean }>(db, this.#resume, [queue, this.#channel]);
    return rows[0]?.changed ?? false;
  }

  /** Every queue that has jobs or settings, by name. */
  async list(db: Queryable): Promise<QueueInfo[]> {
    const { rows } = await run<
      { name: string; paused: boolean; paused_at: Date | null; queued: number; running: number } & LimitsRow
    >(db, this.#list, [QUEUE_NAMES_EXACT_LIMIT, this.#schema]);
    return rows.map((r) => ({
      name: r.name,
      paused: r.paused,
      pausedAt: r.paused_at,
      queued: r.queued,
      running: r.running,
      limits: limitsOf(r),
    }));
  }

  /** Which of `names` are paused now. Reads only. */
  async paused(db: Queryable, names: readonly string[]): Promise<Set<string>> {
    const { rows } = await run<{ name: string }>(db, this.#paused, [names]);
    return new Set(rows.map((r) => r.name));
  }
}
