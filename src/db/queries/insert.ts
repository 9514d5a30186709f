/**
 * Inserting jobs: one, or many in one statement. Workers are woken by the
 * table's insert trigger on commit, whatever inserted the rows.
 */
import type { JobRecord } from '../../job/job.js';
import type { UniqueSpec } from '../../job/unique.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { UniqueInsertQueries } from './insert-unique.js';
import { JOB_COLUMNS, type JobRow, toJobRecord } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** One job to insert, already validated and serialised. */
export interface NewJob {
  kind: string;
  queue: string;
  payloadJson: string;
  priority: number;
  runAt: Date | null;
  delayMs: number | null;
  maxAttempts: number;
  /** The job's unique key; jobs with one go through {@link InsertQueries.unique}. */
  unique?: UniqueSpec | undefined;
}

/** What the database decided for one inserted job of a batch. */
export interface InsertedJob {
  id: string;
  runAt: Date;
  createdAt: Date;
}

/** Statements that insert jobs. */
export class InsertQueries {
  /** The statements of jobs with a unique key (a shape of their own). */
  readonly unique: UniqueInsertQueries;
  readonly #one: Statement;
  readonly #many: Statement;

  constructor(names: SchemaNames) {
    this.unique = new UniqueInsertQueries(names);
    this.#one = names.statement(
      'insert_one',
      `INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts)
       VALUES ($1, $2, $3::jsonb, $4,
               COALESCE($5::timestamptz, now() + COALESCE($6::float8, 0) * interval '1 millisecond'), $7)
       RETURNING ${JOB_COLUMNS}`,
    );
    // Returns only what the database decided (id, run_at, created_at): the rest
    // the caller already has, and sending payloads back costs as much as inserting them.
    this.#many = names.statement(
      'insert_many',
      `INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts)
       SELECT r.kind, r.queue, r.payload, r.priority,
              COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond'), r.max_attempts
       FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::int[], $5::timestamptz[], $6::float8[], $7::int[])
            WITH ORDINALITY AS r(kind, queue, payload, priority, run_at, delay_ms, max_attempts, ord)
       ORDER BY r.ord
       RETURNING id, run_at, created_at`,
    );
  }

  /** Inserts one job; on the caller's connection when given. */
  async one(db: Queryable, job: NewJob): Promise<JobRecord> {
    const { rows } = await run<JobRow>(db, this.#one, [
      job.kind,
      job.queue,
      job.payloadJson,
      job.priority,
      job.runAt,
      job.delayMs,
      job.maxAttempts,
    ]);
    return toJobRecord(rows[0]!);
  }

  /** Inserts many jobs in one statement (all or none); returns what the database decided, in input order. */
  async many(db: Queryable, jobs: readonly NewJob[]): Promise<InsertedJob[]> {
    const n = jobs.length;
    const kinds = new Array<string>(n);
    const queues = new Array<string>(n);
    const payloads = new Array<string>(n);
    const priorities = new Array<number>(n);
    const runAts = new Array<Date | null>(n);
    const delays = new Array<number | null>(n);
    const maxAttempts = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      const j = jobs[i]!;
      kinds[i] = j.kind;
      queues[i] = j.queue;
      payloads[i] = j.payloadJson;
      priorities[i] = j.priority;
      runAts[i] = j.runAt;
      delays[i] = j.delayMs;
      maxAttempts[i] = j.maxAttempts;
    }
    const { rows } = await run<{ id: string; run_at: Date; created_at: Date }>(db, this.#many, [
      kinds,
      queues,
      payloads,
      priorities,
      runAts,
      delays,
      maxAttempts,
    ]);
    // Identity values follow the insert's ORDER BY, so id order is input order.
    // Ids are decimal strings of one sign: shorter is smaller, then compare as text.
    rows.sort((a, b) => a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return rows.map((r) => ({ id: r.id, runAt: r.run_at, createdAt: r.created_at }));
  }
}
