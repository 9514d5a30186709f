/**
 * Pause and resume queues, and list them. A paused queue stays paused across
 * worker restarts (it is a row of the queues table) until it is resumed.
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import type { QueueInfo } from '../db/queries/queues.js';
import { assertName } from '../job/job.js';
import { clientOrPool } from '../producer/job-options.js';

export type { QueueInfo };

/**
 * A queue name as given to a queue operation, checked as `enqueue` checks it.
 *
 * @throws {ValidationError} (field `name`) when not a string, empty, not
 *   storable text, or longer than 1024 bytes of UTF-8 (what an index entry holds).
 */
export function queueName(name: unknown): string {
  assertName(name, 'name');
  return name;
}

/**
 * Pauses a queue: within about a second no worker claims its jobs (workers
 * also give back jobs of it they hold in their prefetch buffer); running jobs
 * finish. Pausing a paused queue changes nothing.
 *
 * @returns true when the queue was running before, false when it was paused already.
 * @throws {ValidationError} (field `name`) when the name is empty, not storable text or longer than 1024 bytes.
 */
export async function pauseQueue(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  options: unknown,
): Promise<boolean> {
  const queue = queueName(name);
  return queries.queues.pause(clientOrPool(pool, options), queue);
}

/**
 * Resumes a paused queue and wakes workers at once.
 *
 * @returns true when the queue was paused, false when it was not.
 * @throws {ValidationError} (field `name`) when the name is empty, not storable text or longer than 1024 bytes.
 */
export async function resumeQueue(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  options: unknown,
): Promise<boolean> {
  const queue = queueName(name);
  return queries.queues.resume(clientOrPool(pool, options), queue);
}

/** Every queue with jobs or settings: paused or not, and its queued and running counts. */
export async function listQueues(queries: JobQueries, pool: pg.Pool, options: unknown): Promise<QueueInfo[]> {
  return queries.queues.list(clientOrPool(pool, options));
}
