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
 * Pauses or resumes a queue: one function, as both check the name and the
 * `client` option alike and differ only in the statement. Paused, within
 * about a second no worker claims its jobs (workers also give back jobs of it
 * they hold in their prefetch buffer) and running jobs finish; resumed,
 * workers are woken at once. Pausing a paused queue, or resuming a running
 * one, changes nothing.
 *
 * @param action - `'pause'` or `'resume'`.
 * @param options - `{ client }`: the caller's connection, else `pool`.
 * @returns true when the queue's state changed (it was running before a pause,
 *   paused before a resume), false when it already was as asked.
 * @throws {ValidationError} (field `name`) when the name is empty, not storable
 *   text or longer than 1024 bytes; (field `options…`) on a bad option.
 */
export async function pauseOrResumeQueue(
  queries: JobQueries,
  pool: pg.Pool,
  action: 'pause' | 'resume',
  name: unknown,
  options: unknown,
): Promise<boolean> {
  const queue = queueName(name);
  return queries.queues[action](clientOrPool(pool, options), queue);
}

/** Every queue with jobs or settings: paused or not, and its queued and running counts. */
export async function listQueues(queries: JobQueries, pool: pg.Pool, options: unknown): Promise<QueueInfo[]> {
  return queries.queues.list(clientOrPool(pool, options));
}
