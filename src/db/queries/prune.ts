/**
 * Retention: deletes finished jobs (and archived ones) older than a given age
 * by `finished_at`, oldest first, a bounded batch per statement so that no
 * statement holds many row locks or runs long. Callers loop.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** Statuses retention may delete: the finished ones. */
export const PRUNABLE_STATUSES = ['succeeded', 'failed', 'dead', 'cancelled'] as const;

/** Longest retention age: 100 years, in milliseconds (an age, not a timer). */
export const MAX_RETENTION_MS = 3_155_760_000_000;

/** One of {@link PRUNABLE_STATUSES}. */
export type PrunableStatus = (typeof PRUNABLE_STATUSES)[number];

/** The retention statements. */
export class PruneQueries {
  readonly #jobs: Statement;
  readonly #archive: Statement;

  constructor(names: SchemaNames) {
    // Jobs rows are locked SKIP LOCKED so a prune never waits on a worker's row;
    // archive rows are written once and never locked, so no lock is taken there
    // (and the worker role needs no UPDATE on the archive).
    const batch = (table: string, extra: string, lock: string) =>
      `WITH doomed AS (
         SELECT id FROM ${table}
         WHERE finished_at < now() - $2 * interval '1 millisecond' AND status = ANY($1::text[]) ${extra}
         ORDER BY finished_at
         LIMIT $3
         ${lock}
       ), gone AS (DELETE FROM ${table} WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING 1)
       SELECT count(*)::int AS deleted FROM gone`;
    this.#jobs = names.statement(
      'prune_jobs',
      batch(
        names.jobs,
        `AND status IN ('succeeded', 'failed', 'dead', 'cancelled')`,
        'FOR UPDATE SKIP LOCKED',
      ),
    );
    this.#archive = names.statement('prune_archive', batch(names.archive, '', ''));
  }

  /** Deletes at most `limit` finished jobs of `statuses` older than `olderThanMs`; returns how many. */
  async jobs(db: Queryable, statuses: readonly PrunableStatus[], olderThanMs: number, limit: number) {
    return this.#batch(db, this.#jobs, statuses, olderThanMs, limit);
  }

  /** Deletes at most `limit` archived jobs of `statuses` older than `olderThanMs`; returns how many. */
  async archive(db: Queryable, statuses: readonly PrunableStatus[], olderThanMs: number, limit: number) {
    return this.#batch(db, this.#archive, statuses, olderThanMs, limit);
  }

  async #batch(
    db: Queryable,
    statement: Statement,
    statuses: readonly PrunableStatus[],
    olderThanMs: number,
    limit: number,
  ): Promise<number> {
    const { rows } = await run<{ deleted: number }>(db, statement, [statuses, olderThanMs, limit]);
    return rows[0]?.deleted ?? 0;
  }
}
