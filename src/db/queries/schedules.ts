/**
 * Every statement on the schedules table: create or update, remove, list, and
 * the scheduler's lock-and-advance of due rows. Row locks, not a leader in
 * memory, make each slot enqueued once.
 */
import type { ScheduleInfo } from '../../schedule/schedule-options.js';
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** A schedule row as selected (snake_case, as PostgreSQL returns it). */
export interface ScheduleRow
  extends Pick<ScheduleInfo, 'name' | 'cron' | 'timezone' | 'kind' | 'payload' | 'queue' | 'priority'> {
  max_attempts: number;
  /** max_attempts was not given: its jobs leave it out too. */
  max_attempts_default: boolean;
  overlap: 'skip' | 'allow';
  catch_up: 'latest' | 'all' | 'none';
  catch_up_ms: string;
  next_run_at: Date;
  last_run_at: Date | null;
  last_job_id: string | null;
  created_at: Date;
  updated_at: Date;
  /** Why the scheduler set the row aside; null while it runs. */
  parked_reason: string | null;
}

/** A schedule to store, validated; `nextRunAt` is its first slot after the database's now. */
export interface NewSchedule {
  name: string;
  cron: string;
  timezone: string;
  kind: string;
  payloadJson: string;
  queue: string;
  priority: number;
  /** null when not given: the row holds 20, marked as a default. */
  maxAttempts: number | null;
  overlap: 'skip' | 'allow';
  catchUp: 'latest' | 'all' | 'none';
  catchUpMs: number;
  nextRunAt: Date;
}

const COLUMNS =
  'name, cron, timezone, kind, payload, queue, priority, max_attempts, max_attempts_default, overlap, catch_up, catch_up_ms, next_run_at, last_run_at, last_job_id, created_at, updated_at, parked_reason';

/** The statements of one schema's schedules table. */
export class ScheduleQueries {
  readonly #now: Statement;
  readonly #upsert: Statement;
  readonly #remove: Statement;
  readonly #list: Statement;
  readonly #lockDue: Statement;
  readonly #advance: Statement;
  readonly #untilNext: Statement;
  readonly #park: Statement;
  readonly #savepoint: Statement;
  readonly #rollbackToSavepoint: Statement;
  readonly #releaseSavepoint: Statement;

  constructor(names: SchemaNames) {
    const table = `${names.quoted}.schedules`;
    this.#now = names.statement('schedule_now', 'SELECT now() AS now');
    // Changing the rule (cron or time zone) restarts it from now; changing
    // anything else keeps the slot it is waiting for.
    this.#upsert = names.statement(
      'schedule_upsert',
      `INSERT INTO ${table} AS s (name, cron, timezone, kind, payload, queue, priority, max_attempts,
                                  max_attempts_default, overlap, catch_up, catch_up_ms, next_run_at)
       VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, COALESCE($8::int, 20), $8::int IS NULL, $9, $10, $11, $12)
       ON CONFLICT (name) DO UPDATE
       SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind, payload = EXCLUDED.payload,
           queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
           max_attempts_default = EXCLUDED.max_attempts_default,
           overlap = EXCLUDED.overlap, catch_up = EXCLUDED.catch_up, catch_up_ms = EXCLUDED.catch_up_ms,
           next_run_at = CASE WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                              THEN s.next_run_at ELSE EXCLUDED.next_run_at END,
           updated_at = now(), parked_reason = NULL
       RETURNING ${COLUMNS}`,
    );
    this.#remove = names.statement('schedule_remove', `DELETE FROM ${table} WHERE name = $1 RETURNING name`);
    this.#list = names.statement('schedule_list', `SELECT ${COLUMNS} FROM ${table} ORDER BY name`);
    this.#lockDue = names.statement(
      'schedule_lock_due',
      `SELECT ${COLUMNS}, now() AS now FROM ${table}
       WHERE next_run_at <= now() AND parked_reason IS NULL
       ORDER BY next_run_at
       LIMIT $1
       FOR UPDATE SKIP LOCKED`,
    );
    // The caller holds the row's lock (lockDue), so no other scheduler moved it.
    this.#advance = names.statement(
      'schedule_advance',
      `UPDATE ${table}
       SET next_run_at = $2, last_run_at = COALESCE($3, last_run_at), last_job_id = COALESCE($4, last_job_id)
       WHERE name = $1`,
    );
    // Also under the caller's row lock; setting the column is what keeps the
    // unpark trigger from clearing it.
    this.#park = names.statement('schedule_park', `UPDATE ${table} SET parked_reason = $2 WHERE name = $1`);
    // One schedule's jobs go in under a savepoint, so a row whose jobs the
    // database refuses is parked without undoing the other schedules' slots.
    this.#savepoint = names.statement('schedule_savepoint', 'SAVEPOINT skiplock_schedule');
    this.#rollbackToSavepoint = names.statement(
      'schedule_rollback_to_savepoint',
      'ROLLBACK TO SAVEPOINT skiplock_schedule',
    );
    this.#releaseSavepoint = names.statement(
      'schedule_release_savepoint',
      'RELEASE SAVEPOINT skiplock_schedule',
    );
    this.#untilNext = names.statement(
      'schedule_until_next',
      `SELECT (EXTRACT(EPOCH FROM min(next_run_at) - clock_timestamp()) * 1000)::float8 AS ms FROM ${table}
       WHERE parked_reason IS NULL`,
    );
  }

  /** The database's clock. */
  async now(db: Queryable): Promise<Date> {
    const { rows } = await run<{ now: Date }>(db, this.#now, []);
    return rows[0]!.now;
  }

  /** Creates the schedule, or updates the one of that name; returns the stored row. */
  async upsert(db: Queryable, s: NewSchedule): Promise<ScheduleRow> {
    const { rows } = await run<ScheduleRow>(db, this.#upsert, [
      s.name,
      s.cron,
      s.timezone,
      s.kind,
      s.payloadJson,
      s.queue,
      s.priority,
      s.maxAttempts,
      s.overlap,
      s.catchUp,
      s.catchUpMs,
      s.nextRunAt,
    ]);
    return rows[0]!;
  }

  /** Removes a schedule; true when it existed. Jobs it enqueued stay. */
  async remove(db: Queryable, name: string): Promise<boolean> {
    const { rows } = await run(db, this.#remove, [name]);
    return rows.length > 0;
  }

  /** Every schedule, by name. */
  async list(db: Queryable): Promise<ScheduleRow[]> {
    return (await run<ScheduleRow>(db, this.#list, [])).rows;
  }

  /**
   * Locks up to `limit` due schedules that no other transaction holds, with the
   * database's now. Run inside the scheduler's transaction.
   */
  async lockDue(db: Queryable, limit: number): Promise<{ rows: ScheduleRow[]; now: Date | undefined }> {
    const { rows } = await run<ScheduleRow & { now: Date }>(db, this.#lockDue, [limit]);
    return { rows, now: rows[0]?.now };
  }

  /** Moves a schedule locked by {@link lockDue} to `nextRunAt`, recording the last job enqueued, if any. */
  async advance(
    db: Queryable,
    name: string,
    nextRunAt: Date,
    last: { runAt: Date; jobId: string } | undefined,
  ): Promise<void> {
    await run(db, this.#advance, [name, nextRunAt, last?.runAt ?? null, last?.jobId ?? null]);
  }

  /** Sets a schedule locked by {@link lockDue} aside: it is not due again until its row is updated. */
  async park(db: Queryable, name: string, reason: string): Promise<void> {
    await run(db, this.#park, [name, reason]);
  }

  /**
   * Runs `fn` under a savepoint of the caller's transaction: when it throws,
   * what it did is undone and the transaction goes on; the error is rethrown.
   */
  async underSavepoint<T>(db: Queryable, fn: () => Promise<T>): Promise<T> {
    await run(db, this.#savepoint, []);
    try {
      const result = await fn();
      await run(db, this.#releaseSavepoint, []);
      return result;
    } catch (error) {
      await run(db, this.#rollbackToSavepoint, []);
      throw error;
    }
  }

  /**
   * Milliseconds from the database's clock (this instant, not the transaction's
   * start) to the earliest next slot (negative: due), or null without
   * schedules that are not parked.
   */
  async untilNext(db: Queryable): Promise<number | null> {
    const { rows } = await run<{ ms: number | null }>(db, this.#untilNext, []);
    return rows[0]?.ms ?? null;
  }
}
