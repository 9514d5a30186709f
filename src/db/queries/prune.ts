/**
 * Retention: deletes finished jobs (and archived ones) older than a given age
 * by `finished_at`, oldest first, a bounded batch per statement so that no
 * statement holds many row locks or runs long; and the archive's day
 * partitions, created ahead and dropped whole once expired. Callers loop.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** Statuses retention may delete: the finished ones. */
export const PRUNABLE_STATUSES = ['succeeded', 'failed', 'dead', 'cancelled'] as const;

/** Longest retention age: 100 years, in milliseconds (an age, not a timer). */
export const MAX_RETENTION_MS = 3_155_760_000_000;

/** One of {@link PRUNABLE_STATUSES}. */
export type PrunableStatus = (typeof PRUNABLE_STATUSES)[number];

/** What one call of the archive's partition upkeep did. */
export interface ArchivePartitionsResult {
  /** Day partitions created. */
  created: number;
  /** Expired day partitions dropped. */
  dropped: number;
  /** Expired day partitions left for the next call: their lock was not granted within 1 s. */
  skipped: number;
}

/** The retention statements. */
export class PruneQueries {
  readonly #jobs: Statement;
  readonly #archive: Statement;
  readonly #archiveDefault: Statement;
  readonly #partitions: Statement;

  constructor(names: SchemaNames) {
    // Jobs rows are locked SKIP LOCKED so a prune never waits on a worker's row;
    // archive rows are written once and never locked, so no lock is taken there
    // (and the worker role needs no UPDATE on the archive). The archive has no
    // primary key (it is partitioned by finished_at), so its rows are deleted
    // by id and finished_at: the cutoff prunes the partitions the DELETE
    // visits to the expired ones.
    const cutoff = `now() - $2 * interval '1 millisecond'`;
    const batch = (table: string, extra: string, lock: string, match: string) =>
      `WITH doomed AS (
         SELECT id FROM ${table}
         WHERE finished_at < ${cutoff} AND status = ANY($1::text[]) ${extra}
         ORDER BY finished_at
         LIMIT $3
         ${lock}
       ), gone AS (DELETE FROM ${table} WHERE id = ANY(ARRAY(SELECT id FROM doomed)) ${match} RETURNING 1)
       SELECT count(*)::int AS deleted FROM gone`;
    this.#jobs = names.statement(
      'prune_jobs',
      batch(
        names.jobs,
        // Parents kept for their children wait for the maintenance loop to apply their policy.
        `AND status IN ('succeeded', 'failed', 'dead', 'cancelled')
         AND NOT (has_children AND status = 'succeeded' AND on_success IN ('delete', 'archive'))`,
        'FOR UPDATE SKIP LOCKED',
        '',
      ),
    );
    this.#archive = names.statement(
      'prune_archive',
      batch(names.archive, '', '', `AND finished_at < ${cutoff}`),
    );
    this.#archiveDefault = names.statement(
      'prune_archive_default',
      batch(`${names.quoted}.jobs_archive_default`, '', '', ''),
    );
    this.#partitions = names.statement(
      'archive_partitions',
      `SELECT created, dropped, skipped
       FROM ${names.quoted}.archive_partitions(COALESCE($1::timestamptz, now()), $2::int, $3::bigint)`,
    );
  }

  /** Deletes at most `limit` finished jobs of `statuses` older than `olderThanMs`; returns how many. */
  async jobs(db: Queryable, statuses: readonly PrunableStatus[], olderThanMs: number, limit: number) {
    return this.#batch(db, this.#jobs, statuses, olderThanMs, limit);
  }

  /**
   * Deletes at most `limit` archived jobs of `statuses` older than
   * `olderThanMs`, from every partition; returns how many. Leaves dead tuples
   * in the partitions it deletes from: for whole days, drop partitions.
   */
  async archive(db: Queryable, statuses: readonly PrunableStatus[], olderThanMs: number, limit: number) {
    return this.#batch(db, this.#archive, statuses, olderThanMs, limit);
  }

  /**
   * Deletes at most `limit` rows of `statuses` older than `olderThanMs` from
   * the archive's default partition only (rows archived on a day that had no
   * partition yet); returns how many.
   */
  async archiveDefault(
    db: Queryable,
    statuses: readonly PrunableStatus[],
    olderThanMs: number,
    limit: number,
  ) {
    return this.#batch(db, this.#archiveDefault, statuses, olderThanMs, limit);
  }

  /**
   * The archive's partition upkeep: creates the partitions of the UTC day of
   * `now` (the database clock when null) and of the `aheadDays` after it, and
   * with `retentionMs` drops every day partition whose whole day ended more
   * than `retentionMs` before `now`.
   */
  async partitions(
    db: Queryable,
    now: Date | null,
    aheadDays: number,
    retentionMs: number | undefined,
  ): Promise<ArchivePartitionsResult> {
    const { rows } = await run<ArchivePartitionsResult>(db, this.#partitions, [
      now,
      aheadDays,
      retentionMs === undefined ? null : Math.floor(retentionMs),
    ]);
    const row = rows[0];
    return { created: row?.created ?? 0, dropped: row?.dropped ?? 0, skipped: row?.skipped ?? 0 };
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
