/**
 * Inserting jobs that carry a unique key: a shape of its own, so the plain
 * insert stays as it was. The unique index on `unique_lock` (migration 0003)
 * decides; these statements only ask it. Keys go in one fixed (byte) order,
 * both the inserts and the row locks of a `'replace'`, so two batches that
 * share keys wait on each other instead of deadlocking.
 */
import type { UniqueSpec } from '../../job/unique.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { extendedBatchSql, extendedBatchValues, isExtended, type NewJob } from './insert.js';
import { JOB_COLUMNS, type JobRow } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** A job to insert with its unique key. */
export interface NewUniqueJob extends NewJob {
  unique: UniqueSpec;
}

/** The savepoints of a batch: where it begins, and where a run of its keys begins. */
export type UniqueSavepoint = 'batch' | 'keys';
const UNIQUE_SAVEPOINTS: readonly UniqueSavepoint[] = ['batch', 'keys'];

/** A row these statements return: the job, its key, and whether a `'replace'` rewrote it. */
export interface UniqueJobRow extends JobRow {
  unique_key: string;
  replaced: boolean;
}

/**
 * A row of {@link UniqueInsertQueries.resolve}: the holder of a key, and when
 * a `'replace'` rewrote it, what it held just before (its row locked) and the
 * statement's `now()`, from which a rewrite's delay counts.
 */
export interface HolderRow extends UniqueJobRow {
  prior_payload: unknown;
  prior_priority: number | null;
  prior_run_at: Date | null;
  prior_max_attempts: number | null;
  now: Date;
}

const QUALIFIED_COLUMNS = JOB_COLUMNS.split(', ')
  .map((c) => `j.${c}`)
  .join(', ');

/** Statements of the unique-key shape. */
export class UniqueInsertQueries {
  readonly #insert: Statement;
  readonly #insertExtended: Statement;
  readonly #resolve: Statement;
  /** The holders of keys none of whose items replaces: read only, so a producer needs no UPDATE grant. */
  readonly #holders: Statement;
  readonly #savepoints = new Map<
    UniqueSavepoint,
    { set: Statement; rollback: Statement; release: Statement }
  >();
  readonly #channel: string;

  constructor(names: SchemaNames) {
    this.#channel = names.channel;
    // A max_attempts left out (NULL) is the table's default, 20, marked as such.
    // NOT EXISTS spares an identity value for a key already held by a committed
    // job; ON CONFLICT settles the race with an uncommitted one (it waits for
    // that transaction, and inserts if it rolls back). Neither is a
    // check-then-insert: the unique index decides.
    // Jobs with a trace context, tags, a start deadline, a group key or their
    // own success policy go through a statement of its own, whose extra
    // parameters (those of a batch insert's extended shape) start at $10.
    const insert = (name: string, moreColumns = '', moreValues = '', moreRows = '', moreNames = '') =>
      names.statement(
        name,
        `INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default,
                                  unique_key, unique_states${moreColumns})
       SELECT r.kind, r.queue, r.payload, r.priority,
              COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond'),
              COALESCE(r.max_attempts, 20), r.max_attempts IS NULL, r.unique_key, r.unique_states::text[]${moreValues}
       FROM ROWS FROM (unnest($1::text[], $2::text[], $3::jsonb[], $4::int[], $5::timestamptz[], $6::float8[],
                              $7::int[], $8::text[], $9::text[])${moreRows})
            AS r(kind, queue, payload, priority, run_at, delay_ms, max_attempts, unique_key, unique_states${moreNames})
       WHERE NOT EXISTS (SELECT 1 FROM ${names.jobs} h WHERE h.unique_lock = r.unique_key)
       ORDER BY r.unique_key COLLATE "C"
       ON CONFLICT (unique_lock) WHERE unique_lock IS NOT NULL DO NOTHING
       RETURNING ${JOB_COLUMNS}, unique_key, false AS replaced`,
      );
    this.#insert = insert('insert_unique');
    this.#insertExtended = insert('insert_unique_extended', ...extendedBatchSql(10));
    // The jobs holding the keys that were not inserted; with 'replace', a queued
    // holder is rewritten (and its queue woken, since its run_at may be sooner).
    // The holders to rewrite are locked first, in key order (a lock taken in
    // ORDER BY's order), so two batches replacing the same keys queue behind
    // each other instead of deadlocking; the lock also gives what the holder
    // held just before, which the batch's earlier items of that key return.
    this.#resolve = names.statement(
      'resolve_unique',
      `WITH r AS (
         SELECT * FROM unnest($1::text[], $2::bool[], $3::jsonb[], $4::int[], $5::timestamptz[], $6::float8[],
                              $7::int[])
           AS r(unique_key, replace, payload, priority, run_at, delay_ms, max_attempts)
       ), locked AS (
         SELECT j.id, j.payload, j.priority, j.run_at, j.max_attempts
         FROM ${names.jobs} j JOIN r ON j.unique_lock = r.unique_key
         WHERE r.replace AND j.status = 'queued'
         ORDER BY j.unique_lock COLLATE "C"
         FOR NO KEY UPDATE OF j
       ), replaced AS (
         UPDATE ${names.jobs} j
         SET payload = r.payload, priority = r.priority, max_attempts = COALESCE(r.max_attempts, 20),
             max_attempts_default = r.max_attempts IS NULL,
             run_at = COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond')
         FROM r, locked l
         WHERE j.id = l.id AND j.unique_lock = r.unique_key AND j.status = 'queued'
         RETURNING ${QUALIFIED_COLUMNS}, j.unique_key
       ), woken AS (
         SELECT ${names.wakeUp}($8, 'insert', q.queue,
                  CEIL(EXTRACT(EPOCH FROM q.run_at - now()) * 1000)::bigint)
         FROM (SELECT queue, min(run_at) AS run_at FROM replaced GROUP BY queue) q
       )
       SELECT x.*, true AS replaced, l.payload AS prior_payload, l.priority AS prior_priority,
              l.run_at AS prior_run_at, l.max_attempts AS prior_max_attempts, now() AS now,
              (SELECT count(*) FROM woken) AS woken
       FROM replaced x JOIN locked l ON l.id = x.id
       UNION ALL
       SELECT ${QUALIFIED_COLUMNS}, j.unique_key, false, NULL, NULL, NULL, NULL, now(), 0
       FROM ${names.jobs} j JOIN r ON j.unique_lock = r.unique_key
       WHERE NOT EXISTS (SELECT 1 FROM replaced x WHERE x.id = j.id)`,
    );
    this.#holders = names.statement(
      'unique_holders',
      `SELECT ${QUALIFIED_COLUMNS}, j.unique_key, false AS replaced, NULL::jsonb AS prior_payload,
              NULL::int AS prior_priority, NULL::timestamptz AS prior_run_at, NULL::int AS prior_max_attempts,
              now() AS now, 0 AS woken
       FROM ${names.jobs} j WHERE j.unique_lock = ANY($1::text[])`,
    );
    for (const mark of UNIQUE_SAVEPOINTS) {
      const name = `skiplock_unique${mark === 'batch' ? '' : '_keys'}`;
      this.#savepoints.set(mark, {
        set: names.statement(`savepoint_unique_${mark}`, `SAVEPOINT ${name}`),
        rollback: names.statement(`rollback_to_savepoint_unique_${mark}`, `ROLLBACK TO SAVEPOINT ${name}`),
        release: names.statement(`release_savepoint_unique_${mark}`, `RELEASE SAVEPOINT ${name}`),
      });
    }
  }

  /**
   * Inserts the jobs whose key no job holds (keys must be distinct); returns
   * the rows inserted. A job whose key is held is left out, not an error. The
   * first job's trace context, when it has one, is stored with every job.
   */
  async insert(db: Queryable, jobs: readonly NewUniqueJob[]): Promise<UniqueJobRow[]> {
    const values: unknown[] = [
      jobs.map((j) => j.kind),
      jobs.map((j) => j.queue),
      jobs.map((j) => j.payloadJson),
      jobs.map((j) => j.priority),
      jobs.map((j) => j.runAt),
      jobs.map((j) => j.delayMs),
      jobs.map((j) => j.maxAttempts),
      jobs.map((j) => j.unique.key),
      jobs.map((j) => j.unique.statesText),
    ];
    if (!jobs.some(isExtended)) return (await run<UniqueJobRow>(db, this.#insert, values)).rows;
    values.push(...extendedBatchValues(jobs));
    return (await run<UniqueJobRow>(db, this.#insertExtended, values)).rows;
  }

  /**
   * The jobs that now hold the keys of `jobs` (keys must be distinct),
   * rewriting queued ones for jobs with `replace` (locked in key order); the
   * holders of the others are only read, nothing locked (and when no job
   * replaces, by a read-only statement: a producer role without `UPDATE` on the
   * table may enqueue keys that are held). A key that no job holds any more
   * (its holder finished in between) has no row.
   */
  async resolve(db: Queryable, jobs: readonly NewUniqueJob[]): Promise<HolderRow[]> {
    if (!jobs.some((j) => j.unique.replace)) {
      // Nothing to rewrite: a plain read (the statement that may rewrite needs UPDATE on the table).
      const { rows } = await run<HolderRow>(db, this.#holders, [jobs.map((j) => j.unique.key)]);
      return rows;
    }
    const { rows } = await run<HolderRow>(db, this.#resolve, [
      jobs.map((j) => j.unique.key),
      jobs.map((j) => j.unique.replace),
      jobs.map((j) => j.payloadJson),
      jobs.map((j) => j.priority),
      jobs.map((j) => j.runAt),
      jobs.map((j) => j.delayMs),
      jobs.map((j) => j.maxAttempts),
      this.#channel,
    ]);
    return rows;
  }

  /**
   * Marks a point inside a transaction that a batch's unique inserts can be
   * undone to ({@link rollbackToSavepoint}): `'batch'` where the batch
   * begins, `'keys'` where a run of its keys begins.
   *
   * @throws {DatabaseError} SQLSTATE 25P01 when `db` is not in a transaction.
   */
  async savepoint(db: Queryable, mark: UniqueSavepoint): Promise<void> {
    await run(db, this.#savepoints.get(mark)!.set, []);
  }

  /** Undoes everything since the savepoint `mark` (inserts, rewrites, row locks); the mark stays. */
  async rollbackToSavepoint(db: Queryable, mark: UniqueSavepoint): Promise<void> {
    await run(db, this.#savepoints.get(mark)!.rollback, []);
  }

  /** Keeps what was done since the savepoint `mark` as part of the transaction and drops the mark. */
  async releaseSavepoint(db: Queryable, mark: UniqueSavepoint): Promise<void> {
    await run(db, this.#savepoints.get(mark)!.release, []);
  }
}
