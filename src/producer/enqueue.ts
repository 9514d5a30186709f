/**
 * The producer: enqueue one job, or many in one statement, on skiplock's pool
 * or on the caller's connection (so the jobs commit or roll back with the
 * caller's transaction, and wake workers only on commit).
 */

import type pg from 'pg';
import { type NamedStatements, type Queryable, withTransaction } from '../db/executor.js';
import { UnknownParentError } from '../db/queries/dependencies.js';
import type { NewJob } from '../db/queries/insert.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { ValidationError } from '../errors.js';
import { DEFAULT_MAX_ATTEMPTS } from '../job/defaults.js';
import { assertPayloadSize, toJob } from '../job/job.js';
import type { EnqueuedJob } from '../job/unique.js';
import { parseOptions } from '../options.js';
import type { JobTracing } from '../telemetry/tracing.js';
import { insertGraph, insertWithParents, isGraph, planGraph } from './enqueue-graph.js';
import { enqueueUnique, isUnique, type UniqueTransaction } from './enqueue-unique.js';
import {
  clientOptionsSchema,
  type EnqueueOptions,
  enqueueOptionsSchema,
  isJobId,
  toNewJob,
  toNewJobOfMany,
} from './job-options.js';

/**
 * What the enqueue calls run with: a client's statements and pool, whether
 * that pool's statements go named, its tracing when on, its payload bound in bytes.
 */
export interface Producer {
  queries: JobQueries;
  pool: pg.Pool;
  named: NamedStatements;
  tracing: JobTracing | undefined;
  maxPayloadBytes: number;
}

/**
 * Validates and inserts one job; with a unique key, returns the job holding
 * the key instead when there is one (`duplicate: true`). With `tracing`, the
 * insert runs in an `enqueue` span whose context is stored with the job.
 *
 * @throws {ValidationError} naming the field (`kind`, `payload.x`, `options.maxAttempts`…); nothing is inserted.
 * @throws {DatabaseError} from the database.
 */
export async function enqueueOne(
  { queries, pool, named, tracing, maxPayloadBytes }: Producer,
  kind: unknown,
  payload: unknown,
  options: EnqueueOptions,
): Promise<EnqueuedJob> {
  // Most calls give no options: the schema would return {} for them.
  const parsed = isEmptyObject(options) ? {} : parseOptions(enqueueOptionsSchema, options, 'options');
  const job = toNewJob(kind, payload, parsed, { kind: 'kind', payload: 'payload', options: 'options.' });
  assertPayloadSize(job.payloadJson, 'payload', maxPayloadBytes);
  const insert = () => insertOne(queries, pool, named, parsed.client, job);
  if (tracing) {
    const [enqueued] = await tracing.enqueue([job], async () => [await insert()]);
    return enqueued!;
  }
  return insert();
}

/** Whether `value` is a plain object with no keys of its own (`{}`). */
function isEmptyObject(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    Object.getPrototypeOf(value) === Object.prototype &&
    Object.getOwnPropertyNames(value).length === 0
  );
}

/** One validated job: inserted, or found holding its unique key. */
async function insertOne(
  queries: JobQueries,
  pool: pg.Pool,
  named: NamedStatements,
  client: Queryable | undefined,
  job: NewJob,
): Promise<EnqueuedJob> {
  const { dependsOn } = job;
  if (dependsOn) {
    dependsOn.forEach((id, k) => {
      if (!isJobId(id)) throw new ValidationError(`options.dependsOn[${k}]`, 'must be a job id');
    });
    return insertWithParents(queries, pool, client, true, (db) => insertChild(queries, db, job, dependsOn));
  }
  const db = client ?? pool;
  if (isUnique(job)) return (await enqueueUnique(queries, db, [job]))[0]!;
  return { ...toJob(await queries.insert.one(db, job, client ? undefined : named)), duplicate: false };
}

/** A job with parents (job ids, checked): every one must name a job. */
async function insertChild(
  queries: JobQueries,
  db: Queryable,
  job: NewJob,
  parentIds: string[],
): Promise<EnqueuedJob> {
  try {
    const record = await queries.dependencies.insertChild(
      db,
      job,
      parentIds,
      job.onParentFailure ?? 'cancel',
    );
    return { ...toJob(record), duplicate: false };
  } catch (error) {
    if (!(error instanceof UnknownParentError)) throw error;
    throw new ValidationError(
      `options.dependsOn[${parentIds.indexOf(error.parentId)}]`,
      `no job ${error.parentId}`,
    );
  }
}

/**
 * Validates every item, then inserts them all in one statement (all or none).
 * The returned jobs are in input order; each carries the payload as given (the
 * caller's value, `{}` for undefined) and what the database decided (id, run_at,
 * created_at). Items with unique keys behave as the same `enqueue` calls made
 * one after another, and each returns what its call would have: a key held by
 * another job comes back as that job with `duplicate: true`; a key given twice
 * in the batch is inserted once, a later `'skip'` item being a duplicate of
 * the first as it then stands, a later `'replace'` item rewriting it. Batches
 * that share keys never fail because of each other. With `tracing`, the
 * inserts run in one `enqueue` span whose context is stored with every job.
 *
 * @throws {ValidationError} naming the item and field (`jobs[3].delayMs`); nothing is inserted.
 * @throws {DatabaseError} from the database.
 */
export async function enqueueMany(
  { queries, pool, tracing, maxPayloadBytes }: Producer,
  items: unknown,
  options: unknown,
): Promise<EnqueuedJob[]> {
  if (!Array.isArray(items)) throw new ValidationError('jobs', 'must be an array');
  const parsed = parseOptions(clientOptionsSchema, options, 'options');
  if (items.length === 0) return [];
  const rows = items.map((item, i) => toNewJobOfMany(item, i));
  rows.forEach((row, i) => {
    assertPayloadSize(row.payloadJson, `jobs[${i}].payload`, maxPayloadBytes);
  });
  if (isGraph(items)) {
    const plan = planGraph(items, rows);
    const insert = () =>
      insertWithParents(queries, pool, parsed.client, false, (db) => insertGraph(queries, db, rows, plan));
    return tracing ? tracing.enqueue(rows, insert) : insert();
  }
  if (tracing) return tracing.enqueue(rows, () => insertAll(queries, pool, parsed.client, items, rows));
  return insertAll(queries, pool, parsed.client, items, rows);
}

/** Validated jobs, in as few statements as their unique keys allow (all or none); input order. */
function insertAll(
  queries: JobQueries,
  pool: pg.Pool,
  client: Queryable | undefined,
  items: unknown[],
  rows: NewJob[],
): Promise<EnqueuedJob[]> {
  if (!rows.some(isUnique)) return insertPlain(queries, client ?? pool, items, rows);
  if (client) return insertMixed(queries, client, items, rows, 'callers');
  // Two statements or more: on skiplock's pool they share a transaction (all or
  // none), READ COMMITTED so each statement sees the keys others committed.
  return withTransaction(
    pool,
    (client) => insertMixed(queries, client, items, rows, 'ours'),
    undefined,
    true,
  );
}

/** A batch with unique keys: the plain jobs in one statement, the keyed ones by key; input order. */
async function insertMixed(
  queries: JobQueries,
  db: Queryable,
  items: unknown[],
  rows: NewJob[],
  transaction: UniqueTransaction,
): Promise<EnqueuedJob[]> {
  const plainAt: number[] = [];
  const uniqueAt: number[] = [];
  rows.forEach((row, i) => {
    (isUnique(row) ? uniqueAt : plainAt).push(i);
  });
  const result = new Array<EnqueuedJob>(rows.length);
  if (plainAt.length > 0) {
    const plain = await insertPlain(
      queries,
      db,
      plainAt.map((i) => items[i]),
      plainAt.map((i) => rows[i]!),
    );
    plainAt.forEach((at, k) => {
      result[at] = plain[k]!;
    });
  }
  const keyed = await enqueueUnique(queries, db, uniqueAt.map((i) => rows[i]!).filter(isUnique), transaction);
  uniqueAt.forEach((at, k) => {
    result[at] = keyed[k]!;
  });
  return result;
}

/** Jobs without a unique key, in one statement; input order. */
async function insertPlain(
  queries: JobQueries,
  db: Queryable,
  items: unknown[],
  rows: NewJob[],
): Promise<EnqueuedJob[]> {
  const inserted = await queries.insert.many(db, rows);
  return inserted.map((db, i) => {
    const row = rows[i]!;
    const payload = (items[i] as { payload?: unknown }).payload;
    return {
      id: db.id,
      kind: row.kind,
      queue: row.queue,
      payload: payload === undefined ? {} : payload,
      priority: row.priority,
      runAt: db.runAt,
      attempts: 0,
      maxAttempts: row.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      createdAt: db.createdAt,
      duplicate: false,
    };
  });
}
