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
  /**
   * Attempts before the dead letter; null when the producer left it out: the
   * row gets the table's default, 20, marked as a default
   * (`max_attempts_default`), which a kind's `maxAttempts` replaces at the claim.
   */
  maxAttempts: number | null;
  /** The job's unique key; jobs with one go through {@link InsertQueries.unique}. */
  unique?: UniqueSpec | undefined;
  /**
   * The enqueueing span's propagation fields as JSON text (tracing on), stored
   * in `trace_context`; the same for every job of one statement. Jobs without
   * it are inserted by the statements that leave the column out.
   */
  traceContext?: string | undefined;
  /** The job's group key; jobs without one are inserted by the statements that leave `group_key` out. */
  groupKey?: string | undefined;
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
  readonly #oneTraced: Statement;
  readonly #manyTraced: Statement;
  /** The statements with `group_key`, made on first use. */
  readonly #grouped = new Map<string, Statement>();
  readonly #oneOf: (name: string, extraColumns?: string, extraValues?: string) => Statement;
  readonly #manyOf: (
    name: string,
    extraColumns?: string,
    extraValues?: string,
    extraArrays?: string,
  ) => Statement;

  constructor(names: SchemaNames) {
    // The payload arrives as JSON text, cast through text: a driver that
    // serialises jsonb parameters itself (postgres.js) would encode it twice.
    this.unique = new UniqueInsertQueries(names);
    // A max_attempts left out (NULL) is the table's default, 20, marked as such.
    // With tracing on, statements of their own add trace_context ($8), so the
    // plain ones send no extra parameter.
    const one = (name: string, traceColumn = '', traceValue = '') =>
      names.statement(
        name,
        `INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default${traceColumn})
       VALUES ($1, $2, $3::text::jsonb, $4,
               COALESCE($5::timestamptz, now() + COALESCE($6::float8, 0) * interval '1 millisecond'),
               COALESCE($7::int, 20), $7::int IS NULL${traceValue})
       RETURNING ${JOB_COLUMNS}`,
      );
    this.#oneOf = one;
    this.#one = one('insert_one');
    this.#oneTraced = one('insert_one_traced', ', trace_context', ', $8::text::jsonb');
    // Returns only what the database decided: the ids in input order, run_at
    // only where it is not the insert time (a delay or a runAt), and the insert
    // time once. Sending payloads back, or a row and two timestamps per job, costs as
    // much as inserting them. Payloads arrive as one JSON array (no per-element
    // array escaping; `json`, whose text may exceed jsonb's 256 MiB as a whole);
    // ROWS FROM zips it with the other columns by position.
    const many = (name: string, traceColumn = '', traceValue = '', groupArray = '') =>
      names.statement(
        name,
        `WITH inserted AS (
         INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default${traceColumn})
         SELECT r.kind, r.queue, r.payload::jsonb, r.priority,
                COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond'),
                COALESCE(r.max_attempts, 20), r.max_attempts IS NULL${traceValue}
         FROM ROWS FROM (unnest($1::text[]), unnest($2::text[]), json_array_elements($3::text::json), unnest($4::int[]),
                         unnest($5::timestamptz[]), unnest($6::float8[]), unnest($7::int[])${groupArray ? `, ${groupArray}` : ''})
              WITH ORDINALITY AS r(kind, queue, payload, priority, run_at, delay_ms, max_attempts${groupArray ? ', group_key' : ''}, ord)
         ORDER BY r.ord
         RETURNING id, NULLIF(run_at, created_at) AS run_at
       )
       SELECT id, run_at, CASE WHEN row_number() OVER (ORDER BY id) = 1 THEN now() END AS created_at
       FROM inserted
       ORDER BY id`,
      );
    this.#manyOf = many;
    this.#many = many('insert_many');
    this.#manyTraced = many('insert_many_traced', ', trace_context', ', $8::text::jsonb');
  }

  /** Inserts one job; on the caller's connection when given. */
  async one(db: Queryable, job: NewJob): Promise<JobRecord> {
    const values: unknown[] = [
      job.kind,
      job.queue,
      job.payloadJson,
      job.priority,
      job.runAt,
      job.delayMs,
      job.maxAttempts,
    ];
    if (job.traceContext !== undefined) values.push(job.traceContext);
    let statement = job.traceContext === undefined ? this.#one : this.#oneTraced;
    if (job.groupKey !== undefined) {
      values.push(job.groupKey);
      statement = this.#groupedStatement('one', job.traceContext !== undefined);
    }
    const { rows } = await run<JobRow>(db, statement, values);
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
    const maxAttempts = new Array<number | null>(n);
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
    const values: unknown[] = [
      kinds,
      queues,
      `[${payloads.join(',')}]`,
      priorities,
      runAts,
      delays,
      maxAttempts,
    ];
    const traceContext = jobs[0]?.traceContext;
    if (traceContext !== undefined) values.push(traceContext);
    let statement = traceContext === undefined ? this.#many : this.#manyTraced;
    if (jobs.some((j) => j.groupKey !== undefined)) {
      values.push(jobs.map((j) => j.groupKey ?? null));
      statement = this.#groupedStatement('many', traceContext !== undefined);
    }
    const { rows } = await run<{ id: string; run_at: Date | null; created_at: Date | null }>(
      db,
      statement,
      values,
    );
    // Ids follow the insert's ORDER BY, so id order is input order. The insert
    // time is sent once (first row); run_at only where it differs from it.
    const createdAt = rows[0]?.created_at ?? new Date();
    return rows.map((r) => ({ id: r.id, runAt: r.run_at ?? createdAt, createdAt }));
  }

  /** The statement that also sets `group_key` (the last parameter), after the trace context when traced. */
  #groupedStatement(shape: 'one' | 'many', traced: boolean): Statement {
    const name = `insert_${shape}${traced ? '_traced' : ''}_grouped`;
    let statement = this.#grouped.get(name);
    if (statement === undefined) {
      const columns = traced ? ', trace_context, group_key' : ', group_key';
      if (shape === 'one') {
        statement = this.#oneOf(name, columns, traced ? ', $8::text::jsonb, $9' : ', $8');
      } else {
        statement = this.#manyOf(
          name,
          columns,
          traced ? ', $8::text::jsonb, r.group_key' : ', r.group_key',
          traced ? 'unnest($9::text[])' : 'unnest($8::text[])',
        );
      }
      this.#grouped.set(name, statement);
    }
    return statement;
  }
}
