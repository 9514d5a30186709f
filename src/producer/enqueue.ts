/**
 * The producer: enqueue one job, or many in one statement, on skiplock's pool
 * or on the caller's connection (so the jobs commit or roll back with the
 * caller's transaction, and wake workers only on commit).
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import { ValidationError } from '../errors.js';
import { type Job, toJob } from '../job/job.js';
import { parseOptions } from '../options.js';
import {
  clientOptionsSchema,
  type EnqueueOptions,
  enqueueOptionsSchema,
  toNewJob,
  toNewJobOfMany,
} from './job-options.js';

/**
 * Validates and inserts one job.
 *
 * @throws {ValidationError} naming the field (`kind`, `payload.x`, `options.maxAttempts`…); nothing is inserted.
 * @throws {DatabaseError} from the database.
 */
export async function enqueueOne(
  queries: JobQueries,
  pool: pg.Pool,
  kind: unknown,
  payload: unknown,
  options: EnqueueOptions,
): Promise<Job> {
  const parsed = parseOptions(enqueueOptionsSchema, options, 'options');
  const job = toNewJob(kind, payload, parsed, { kind: 'kind', payload: 'payload', options: 'options.' });
  return toJob(await queries.insert.one(parsed.client ?? pool, job));
}

/**
 * Validates every item, then inserts them all in one statement (all or none).
 * The returned jobs are in input order; each carries the payload as given (the
 * caller's value, `{}` for undefined) and what the database decided (id, run_at,
 * created_at).
 *
 * @throws {ValidationError} naming the item and field (`jobs[3].delayMs`); nothing is inserted.
 * @throws {DatabaseError} from the database.
 */
export async function enqueueMany(
  queries: JobQueries,
  pool: pg.Pool,
  items: unknown,
  options: unknown,
): Promise<Job[]> {
  if (!Array.isArray(items)) throw new ValidationError('jobs', 'must be an array');
  const parsed = parseOptions(clientOptionsSchema, options, 'options');
  if (items.length === 0) return [];
  const rows = items.map((item, i) => toNewJobOfMany(item, i));
  const inserted = await queries.insert.many(parsed.client ?? pool, rows);
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
      maxAttempts: row.maxAttempts,
      createdAt: db.createdAt,
    };
  });
}
