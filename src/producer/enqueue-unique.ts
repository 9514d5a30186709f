/**
 * Enqueueing jobs with unique keys: insert those whose key is free, then read
 * (or, with `'replace'`, rewrite) the jobs holding the others. Within a batch
 * the first job of a key acts and the later ones are its duplicates; a later
 * `'replace'` one rewrites it first, as a later enqueue call would. The unique
 * index decides every race; nothing here checks and then inserts.
 */
import type { Queryable } from '../db/executor.js';
import type { NewUniqueJob, UniqueJobRow } from '../db/queries/insert-unique.js';
import { toJobRecord } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { SkiplockError } from '../errors.js';
import { toJob } from '../job/job.js';
import type { EnqueuedJob } from '../job/unique.js';

/**
 * Rounds of insert-then-read before giving up. A round repeats only when a
 * key's holder finished between the two statements, so more than a few means
 * something else is wrong (such as a snapshot that cannot see the holder).
 */
const MAX_ROUNDS = 20;

/**
 * Inserts or finds the job of each unique key, in input order.
 *
 * @throws {DatabaseError} from the database.
 * @throws {SkiplockError} (code `DATABASE`) when a key's holder keeps vanishing.
 */
export async function enqueueUnique(
  queries: JobQueries,
  db: Queryable,
  jobs: readonly NewUniqueJob[],
): Promise<EnqueuedJob[]> {
  const leaderOfKey = new Map<string, number>();
  // Each key's first job, as the batch's later 'replace' jobs of that key leave it
  // when they rewrite it in turn (as consecutive enqueue calls would): their payload,
  // run_at, priority and max_attempts, and 'replace' for a holder already there.
  const actingOfKey = new Map<string, NewUniqueJob>();
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i]!;
    const acting = actingOfKey.get(job.unique.key);
    if (!acting) {
      leaderOfKey.set(job.unique.key, i);
      actingOfKey.set(job.unique.key, job);
    } else if (job.unique.replace) {
      actingOfKey.set(job.unique.key, {
        ...acting,
        payloadJson: job.payloadJson,
        runAt: job.runAt,
        delayMs: job.delayMs,
        priority: job.priority,
        maxAttempts: job.maxAttempts,
        unique: { ...acting.unique, replace: true },
      });
    }
  }
  const outcome = new Map<string, { row: UniqueJobRow; duplicate: boolean }>();
  let pending = [...actingOfKey.values()];
  for (let round = 0; pending.length > 0; round++) {
    if (round === MAX_ROUNDS) {
      throw new SkiplockError(
        'DATABASE',
        `the holders of unique keys kept finishing while they were read (${pending.length} keys left)`,
      );
    }
    for (const row of await queries.insert.unique.insert(db, pending))
      outcome.set(row.unique_key, { row, duplicate: false });
    const held = pending.filter((job) => !outcome.has(job.unique.key));
    if (held.length === 0) break;
    for (const row of await queries.insert.unique.resolve(db, held))
      outcome.set(row.unique_key, { row, duplicate: true });
    pending = held.filter((job) => !outcome.has(job.unique.key));
  }
  return jobs.map((job, i) => {
    const { row, duplicate } = outcome.get(job.unique.key)!;
    return { ...toJob(toJobRecord(row)), duplicate: duplicate || leaderOfKey.get(job.unique.key) !== i };
  });
}

/** Whether a job carries a unique key. */
export function isUnique<J extends { unique?: unknown }>(job: J): job is J & NewUniqueJob {
  return job.unique !== undefined;
}
