/**
 * Enqueueing jobs with unique keys. A batch behaves as the same `enqueue`
 * calls made one after another: a key's first item inserts a job or finds the
 * job holding the key; a later `'skip'` item is a duplicate of that job as it
 * then stands; a later `'replace'` item rewrites it (while it is queued). The
 * database sees one insert and one read (or rewrite) per key, in key order,
 * and each item gets what its own call would have returned. The unique index
 * decides every race; nothing here checks and then inserts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Queryable } from '../db/executor.js';
import type { HolderRow, NewUniqueJob, UniqueJobRow } from '../db/queries/insert-unique.js';
import { toJobRecord } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { DatabaseError, SkiplockError } from '../errors.js';
import { DEFAULT_MAX_ATTEMPTS } from '../job/defaults.js';
import { type Job, toJob } from '../job/job.js';
import type { EnqueuedJob } from '../job/unique.js';

/**
 * Rounds of insert-then-read before giving up. A round repeats only when a
 * key's holder finished between the two statements, or (inside a transaction)
 * when the database broke a deadlock with a worker by failing ours; more than
 * a few means something else is wrong (such as a snapshot that cannot see the
 * holder).
 */
const MAX_ROUNDS = 20;

/** Deadlocks a batch starts over after before it gives up (each costs the server's `deadlock_timeout`). */
const MAX_DEADLOCK_RETRIES = 5;

/** Least pause, in milliseconds, before a batch starts over after a deadlock; jittered, and longer each time. */
const DEADLOCK_PAUSE_MS = 20;

/**
 * The transaction the statements run in, when they share one: skiplock's own
 * (`'ours'`) or the caller's (`'callers'`). Left out, each statement may
 * commit alone (skiplock's pool), or the jobs have a single key.
 */
export type UniqueTransaction = 'ours' | 'callers';

/** What the database did for one key: the job holding it now, and whether this batch inserted it. */
interface KeyOutcome {
  row: UniqueJobRow | HolderRow;
  inserted: boolean;
}

/** The items of one key, in input order, and the one job they amount to. */
interface KeyGroup {
  at: number[];
  acting: NewUniqueJob;
}

/**
 * Inserts or finds the job of each unique key; returns, in input order, what
 * each item's own `enqueue` call would have returned, made one after another.
 *
 * Inside a transaction (`transaction` given) a batch of several keys never
 * waits for another key while holding one out of key order: when a holder
 * finishes between the insert and the read, or a deadlock with a worker
 * fails a statement (SQLSTATE 40P01), the batch's work is undone to a
 * savepoint and done again from the start, in key order.
 *
 * @throws {DatabaseError} from the database; 40001 under REPEATABLE READ or
 *   SERIALIZABLE when a key was taken after the transaction's snapshot.
 * @throws {SkiplockError} (code `DATABASE`) when a key's holder keeps vanishing.
 */
export async function enqueueUnique(
  queries: JobQueries,
  db: Queryable,
  jobs: readonly NewUniqueJob[],
  transaction?: UniqueTransaction,
): Promise<EnqueuedJob[]> {
  const groups = groupByKey(jobs);
  const acting = [...groups.values()].map((g) => g.acting);
  const outcomes =
    transaction && acting.length > 1
      ? await settleAtomically(queries, db, acting, transaction)
      : await settleInRounds(queries, db, acting);
  const results = new Array<EnqueuedJob>(jobs.length);
  for (const [key, group] of groups) {
    const items = group.at.map((i) => jobs[i]!);
    itemResults(items, outcomes.get(key)!).forEach((result, k) => {
      results[group.at[k]!] = result;
    });
  }
  return results;
}

/**
 * The items of each key, and the job they amount to: the first item, with the
 * payload, run_at, priority and max_attempts of the last later `'replace'`
 * item (which rewrites it in turn), and `'replace'` for a holder already there.
 */
function groupByKey(jobs: readonly NewUniqueJob[]): Map<string, KeyGroup> {
  const groups = new Map<string, KeyGroup>();
  jobs.forEach((job, i) => {
    const group = groups.get(job.unique.key);
    if (!group) {
      groups.set(job.unique.key, { at: [i], acting: job });
      return;
    }
    group.at.push(i);
    if (job.unique.replace)
      group.acting = { ...group.acting, ...valuesOf(job), unique: { ...group.acting.unique, replace: true } };
  });
  return groups;
}

/** The fields a `'replace'` rewrites. */
function valuesOf(job: NewUniqueJob) {
  const { payloadJson, runAt, delayMs, priority, maxAttempts } = job;
  return { payloadJson, runAt, delayMs, priority, maxAttempts };
}

/** Insert-then-read rounds; a round retries only the keys whose holder vanished in between. */
async function settleInRounds(
  queries: JobQueries,
  db: Queryable,
  acting: readonly NewUniqueJob[],
): Promise<Map<string, KeyOutcome>> {
  const outcomes = new Map<string, KeyOutcome>();
  let pending = acting;
  for (let round = 0; pending.length > 0; round++) {
    if (round === MAX_ROUNDS) throw vanishing(pending.length);
    pending = await attempt(queries, db, pending, outcomes);
  }
  return outcomes;
}

/**
 * Insert-then-read of every key inside a savepoint. A second round would wait
 * on a smaller key while holding larger ones, which is how two batches
 * deadlock; so a round that leaves a key unsettled is undone whole and the
 * batch starts over in key order. On the caller's connection outside a
 * transaction (no savepoint possible) each statement commits alone, holding
 * nothing across rounds.
 */
async function settleAtomically(
  queries: JobQueries,
  db: Queryable,
  acting: readonly NewUniqueJob[],
  transaction: UniqueTransaction,
): Promise<Map<string, KeyOutcome>> {
  try {
    await queries.insert.unique.savepoint(db);
  } catch (error) {
    if (transaction === 'callers' && error instanceof DatabaseError && error.sqlState === '25P01')
      return settleInRounds(queries, db, acting);
    throw error;
  }
  let deadlocks = 0;
  for (let round = 1; ; round++) {
    const outcomes = new Map<string, KeyOutcome>();
    let failure: unknown;
    let deadlocked = false;
    try {
      const vanished = await attempt(queries, db, acting, outcomes);
      if (vanished.length === 0) {
        if (transaction === 'callers') await queries.insert.unique.releaseSavepoint(db);
        return outcomes;
      }
      failure = vanishing(vanished.length);
    } catch (error) {
      // A deadlock the database broke by failing this statement: with a worker
      // finishing a holder, or with a transaction that took keys out of order
      // across its calls. Undone to the savepoint, the other side goes on.
      if (!(error instanceof DatabaseError && error.sqlState === '40P01')) throw error;
      failure = error;
      deadlocked = true;
      deadlocks++;
    }
    // Undone also before giving up, so the batch leaves nothing (all or none).
    await queries.insert.unique.rollbackToSavepoint(db);
    if (round === MAX_ROUNDS || deadlocks > MAX_DEADLOCK_RETRIES) throw failure;
    // After a deadlock, the other side first takes what this batch let go of;
    // starting again at once could take it back first and close the same cycle.
    if (deadlocked) await sleep(DEADLOCK_PAUSE_MS * (1 + Math.random()) * deadlocks);
  }
}

/**
 * One insert of every key (in key order) and one read of the holders of the
 * keys not inserted; returns the jobs whose key's holder vanished in between.
 */
async function attempt(
  queries: JobQueries,
  db: Queryable,
  jobs: readonly NewUniqueJob[],
  outcomes: Map<string, KeyOutcome>,
): Promise<NewUniqueJob[]> {
  for (const row of await queries.insert.unique.insert(db, jobs))
    outcomes.set(row.unique_key, { row, inserted: true });
  const held = jobs.filter((job) => !outcomes.has(job.unique.key));
  if (held.length === 0) return [];
  for (const row of await queries.insert.unique.resolve(db, held))
    outcomes.set(row.unique_key, { row, inserted: false });
  return held.filter((job) => !outcomes.has(job.unique.key));
}

function vanishing(keys: number): SkiplockError {
  return new SkiplockError(
    'DATABASE',
    `the holders of unique keys kept finishing while they were read (${keys} keys left)`,
  );
}

/**
 * What each item of one key gets, as its own call would have returned it: the
 * job as it stood after that item. The database holds the job as the last
 * item that wrote it left it; the items before see the values they or an
 * earlier `'replace'` wrote (or, for a holder, what it held before).
 */
function itemResults(items: readonly NewUniqueJob[], { row, inserted }: KeyOutcome): EnqueuedJob[] {
  const stored = toJob(toJobRecord(row));
  // A 'replace' item rewrites the job when the batch inserted it or found it queued.
  const rewritable = inserted || row.replaced;
  let lastWrite = 0;
  if (rewritable)
    items.forEach((item, k) => {
      if (item.unique.replace) lastWrite = k;
    });
  // Inserts and rewrites compute run_at from this statement's now().
  const now = inserted ? row.created_at : (row as HolderRow).now;
  let state: Job = row.replaced && !inserted ? priorOf(stored, row as HolderRow) : stored;
  return items.map((item, k) => {
    const duplicate = !(inserted && k === 0);
    if (k >= lastWrite) return { ...stored, duplicate };
    if ((inserted && k === 0) || (rewritable && item.unique.replace)) state = writtenBy(stored, item, now);
    return { ...state, duplicate };
  });
}

/** The job with the values `item` writes (an insert, or a `'replace'` of a queued job). */
function writtenBy(job: Job, item: NewUniqueJob, now: Date): Job {
  return {
    ...job,
    payload: JSON.parse(item.payloadJson),
    priority: item.priority,
    runAt: item.runAt ?? new Date(now.getTime() + (item.delayMs ?? 0)),
    maxAttempts: item.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
  };
}

/** A rewritten holder as it was just before the rewrite. */
function priorOf(job: Job, row: HolderRow): Job {
  return {
    ...job,
    payload: row.prior_payload,
    priority: row.prior_priority!,
    runAt: row.prior_run_at!,
    maxAttempts: row.prior_max_attempts!,
  };
}

/** Whether a job carries a unique key. */
export function isUnique<J extends { unique?: unknown }>(job: J): job is J & NewUniqueJob {
  return job.unique !== undefined;
}
