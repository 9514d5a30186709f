/**
 * Inserting jobs: one, or many in one statement. Workers are woken by the
 * table's insert trigger on commit, whatever inserted the rows.
 */
import type pg from 'pg';
import type { JobRecord } from '../../job/job.js';
import type { UniqueSpec } from '../../job/unique.js';
import type { JobOptions } from '../../producer/job-options.js';
import { type NamedStatements, type Queryable, run, runNamedIfKept, type Statement } from '../executor.js';
import { UniqueInsertQueries } from './insert-unique.js';
import { JOB_COLUMNS, type JobRow, toJobRecord } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/**
 * One job to insert, already validated and serialised. The options it takes
 * as the producer gave them are validated: tags non-empty, dependsOn job ids.
 * A job with tags, a start deadline, a group key or its own success policy
 * goes through the extended statements; one with parents through
 * DependencyQueries.insertChild.
 */
export interface NewJob
  extends Pick<
    JobOptions,
    'tags' | 'startBy' | 'startWithinMs' | 'groupKey' | 'dependsOn' | 'onParentFailure' | 'onSuccess'
  > {
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
}

/**
 * The first seven parameters of every statement that inserts one job ($1…$7):
 * kind, queue, payload (JSON text), priority, run_at, delay in milliseconds,
 * max_attempts. The statements' further parameters follow them.
 */
export function jobColumnValues(job: NewJob): unknown[] {
  return [job.kind, job.queue, job.payloadJson, job.priority, job.runAt, job.delayMs, job.maxAttempts];
}

/** Whether a job needs the extended insert: it carries a trace context, tags, a start deadline, a group key or its own success policy. */
export function isExtended(job: NewJob): boolean {
  return (
    job.traceContext !== undefined ||
    job.tags !== undefined ||
    job.startBy !== undefined ||
    job.startWithinMs !== undefined ||
    job.groupKey !== undefined ||
    job.onSuccess !== undefined
  );
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
  readonly #oneExtended: Statement;
  readonly #manyExtended: Statement;

  constructor(names: SchemaNames) {
    // The payload arrives as JSON text, cast through text: a driver that
    // serialises jsonb parameters itself (postgres.js) would encode it twice.
    this.unique = new UniqueInsertQueries(names);
    // A max_attempts left out (NULL) is the table's default, 20, marked as such.
    // Jobs with a trace context, tags or a start deadline go through extended
    // statements of their own (trace_context $8, tags $9, start_by from $10 or
    // $11 milliseconds on the database clock, group_key $12, on_success $13), so the plain ones send no extra
    // parameter.
    const one = (name: string, moreColumns = '', moreValues = '') =>
      names.statement(
        name,
        `INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default${moreColumns})
       VALUES ($1, $2, $3::text::jsonb, $4,
               COALESCE($5::timestamptz, now() + COALESCE($6::float8, 0) * interval '1 millisecond'),
               COALESCE($7::int, 20), $7::int IS NULL${moreValues})
       RETURNING ${JOB_COLUMNS}`,
      );
    this.#one = one('insert_one');
    this.#oneExtended = one(
      'insert_one_extended',
      ', trace_context, tags, start_by, group_key, on_success',
      `, $8::text::jsonb, $9::text[],
               COALESCE($10::timestamptz, now() + $11::float8 * interval '1 millisecond'), $12, $13::text`,
    );
    // Returns only what the database decided: the ids in input order, run_at
    // only where it is not the insert time (a delay or a runAt), and the insert
    // time once. Sending payloads back, or a row and two timestamps per job, costs as
    // much as inserting them. Payloads arrive as one JSON array (no per-element
    // array escaping; `json`, whose text may exceed jsonb's 256 MiB as a whole);
    // ROWS FROM zips it with the other columns by position. The extended shape
    // takes each job's tags the same way (a JSON array of arrays, null for none:
    // PostgreSQL arrays must be rectangular).
    const many = (name: string, moreColumns = '', moreValues = '', moreRows = '', moreNames = '') =>
      names.statement(
        name,
        `WITH inserted AS (
         INSERT INTO ${names.jobs} (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default${moreColumns})
         SELECT r.kind, r.queue, r.payload::jsonb, r.priority,
                COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond'),
                COALESCE(r.max_attempts, 20), r.max_attempts IS NULL${moreValues}
         FROM ROWS FROM (unnest($1::text[]), unnest($2::text[]), json_array_elements($3::text::json), unnest($4::int[]),
                         unnest($5::timestamptz[]), unnest($6::float8[]), unnest($7::int[])${moreRows})
              WITH ORDINALITY AS r(kind, queue, payload, priority, run_at, delay_ms, max_attempts${moreNames}, ord)
         ORDER BY r.ord
         RETURNING id, NULLIF(run_at, created_at) AS run_at
       )
       SELECT id, run_at, CASE WHEN row_number() OVER (ORDER BY id) = 1 THEN now() END AS created_at
       FROM inserted
       ORDER BY id`,
      );
    this.#many = many('insert_many');
    this.#manyExtended = many('insert_many_extended', ...extendedBatchSql(8));
  }

  /**
   * Inserts one job: on the caller's connection, as plain text; or, with
   * `named`, on skiplock's pool as a named statement while its connections
   * keep them (the server then parses and plans it once per connection).
   */
  async one(db: Queryable, job: NewJob, named?: NamedStatements): Promise<JobRecord> {
    const values = jobColumnValues(job);
    const extended = isExtended(job);
    if (extended)
      values.push(
        job.traceContext ?? null,
        job.tags ?? null,
        job.startBy ?? null,
        job.startWithinMs ?? null,
        job.groupKey ?? null,
        job.onSuccess ?? null,
      );
    const statement = extended ? this.#oneExtended : this.#one;
    const { rows } = named
      ? await runNamedIfKept<JobRow>(db as pg.Pool, statement, values, named)
      : await run<JobRow>(db, statement, values);
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
    const extended = jobs.some(isExtended);
    if (extended) values.push(...extendedBatchValues(jobs));
    const statement = extended ? this.#manyExtended : this.#many;
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
}

/**
 * What the extended shape of a batch insert adds (trace_context, tags,
 * start_by, group_key, on_success), its parameters numbered from `first`: the
 * columns, their values from the rows `r`, the ROWS FROM entries that feed
 * them, and those entries' names. Its parameters are {@link extendedBatchValues}.
 */
export function extendedBatchSql(
  first: number,
): [columns: string, values: string, rows: string, names: string] {
  return [
    ', trace_context, tags, start_by, group_key, on_success',
    `, $${first}::text::jsonb,
                CASE WHEN json_typeof(r.tags) = 'array' THEN ARRAY(SELECT json_array_elements_text(r.tags)) END,
                COALESCE(r.start_by, now() + r.start_within_ms * interval '1 millisecond'), r.group_key, r.on_success`,
    `, json_array_elements($${first + 1}::text::json),
                         unnest($${first + 2}::timestamptz[]), unnest($${first + 3}::float8[]),
                         unnest($${first + 4}::text[]), unnest($${first + 5}::text[])`,
    ', tags, start_by, start_within_ms, group_key, on_success',
  ];
}

/**
 * The parameters of {@link extendedBatchSql}, in its order: the first job's
 * trace context (the same for every job of one call), then each job's tags (a
 * JSON array of arrays, null for none: PostgreSQL arrays must be
 * rectangular), start deadline, group key and success policy.
 */
export function extendedBatchValues(jobs: readonly NewJob[]): unknown[] {
  const n = jobs.length;
  const tags = new Array<string>(n);
  const startBys = new Array<Date | null>(n);
  const startWithinMs = new Array<number | null>(n);
  const groupKeys = new Array<string | null>(n);
  const onSuccess = new Array<string | null>(n);
  for (let i = 0; i < n; i++) {
    const j = jobs[i]!;
    tags[i] = j.tags === undefined ? 'null' : JSON.stringify(j.tags);
    startBys[i] = j.startBy ?? null;
    startWithinMs[i] = j.startWithinMs ?? null;
    groupKeys[i] = j.groupKey ?? null;
    onSuccess[i] = j.onSuccess ?? null;
  }
  return [
    jobs[0]?.traceContext ?? null,
    `[${tags.join(',')}]`,
    startBys,
    startWithinMs,
    groupKeys,
    onSuccess,
  ];
}
