/**
 * Enqueueing jobs with unique keys. A batch behaves as the same `enqueue`
 * calls made one after another: a key's first item inserts a job or finds the
 * job holding the key; a later `'skip'` item is a duplicate of that job as it
 * then stands; a later `'replace'` item rewrites it (while it is queued). The
 * database sees one insert and one read (or rewrite) per key, in key order,
 * and each item gets what its own call would have returned. The unique index
 * decides every race; nothing here checks and then inserts.
 */
import type { Queryable } from '../db/executor.js';
import type { HolderRow, NewUniqueJob, UniqueJobRow, UniqueSavepoint } from '../db/queries/insert-unique.js';
import { toJobRecord } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { DatabaseError, SkiplockError } from '../errors.js';
import { DEFAULT_MAX_ATTEMPTS } from '../job/defaults.js';
import { type Job, toJob } from '../job/job.js';
import type { EnqueuedJob } from '../job/unique.js';
import { deadlockPause, isDeadlock, MAX_DEADLOCK_RETRIES } from './deadlocks.js';

/**
 * Rounds of insert-then-read of one key set before giving up. A round repeats
 * only when a key's holder finished between the two statements; more than a
 * few means something else is wrong (such as a snapshot that cannot see the
 * holder).
 */
const MAX_ROUNDS = 20;

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
 * Inside a transaction (`transaction` given) a batch of several keys takes
 * them in key order, and goes on key by key when a holder finishes between
 * its insert and its read (see {@link settleAtomically}), so overlapping
 * batches never deadlock each other.
 *
 * @throws {DatabaseError} from the database; 40001 under REPEATABLE READ or
 *   SERIALIZABLE when a key was taken after the transaction's snapshot; 40P01
 *   after repeated deadlocks with a transaction that took keys out of order.
 * @throws {SkiplockError} (code `DATABASE`) when one key's holder keeps vanishing.
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
  await settleInto(queries, db, acting, outcomes);
  return outcomes;
}

/** {@link settleInRounds} into `outcomes`. */
async function settleInto(
  queries: JobQueries,
  db: Queryable,
  acting: readonly NewUniqueJob[],
  outcomes: Map<string, KeyOutcome>,
): Promise<void> {
  let pending = acting;
  for (let round = 0; pending.length > 0; round++) {
    if (round === MAX_ROUNDS) throw vanishing(pending.length);
    pending = await attempt(queries, db, pending, outcomes);
  }
}

/**
 * Every key of a batch inside a transaction, never waiting for a key while
 * holding a larger one, and never for a key while holding a row lock: the
 * order in which every batch takes keys (inserts by key, then the row locks
 * of its `'replace'` rewrites by key), so two batches wait for each other
 * instead of deadlocking.
 *
 * First the whole batch as one attempt (insert, then read and rewrite). When a
 * holder finished between the insert and the read, inserting its key again
 * now would wait for it while holding larger keys; so the attempt is undone to
 * the batch's savepoint and the keys go in key order, in runs that insert and
 * read without locking anything: a run that leaves a key unsettled is undone,
 * and the keys before that key go as a run, the key alone next (waiting only
 * for itself: everything held is smaller), then the rest; what earlier runs
 * settled stays, so the batch always moves forward. The rewrites of
 * `'replace'` come last, in one statement. A statement the database fails to
 * break a deadlock (40P01) is undone and tried again after a pause. On the
 * caller's connection outside a transaction (no savepoint possible) each
 * statement commits alone, holding nothing across rounds.
 */
async function settleAtomically(
  queries: JobQueries,
  db: Queryable,
  acting: readonly NewUniqueJob[],
  transaction: UniqueTransaction,
): Promise<Map<string, KeyOutcome>> {
  const unique = queries.insert.unique;
  try {
    await unique.savepoint(db, 'batch');
  } catch (error) {
    if (transaction === 'callers' && error instanceof DatabaseError && error.sqlState === '25P01')
      return settleInRounds(queries, db, acting);
    throw error;
  }
  const steps = new Steps(queries, db);
  let outcomes: Map<string, KeyOutcome>;
  try {
    outcomes =
      (await steps.run(
        'batch',
        async (settled) => (await attempt(queries, db, acting, settled)).length === 0,
      )) ?? (await settleInOrder(queries, db, steps, acting));
  } catch (error) {
    // Undone whole before giving up, so the batch leaves nothing (all or none);
    // a failed statement has left the transaction for the caller to roll back.
    if (!(error instanceof DatabaseError)) await unique.rollbackToSavepoint(db, 'batch');
    throw error;
  }
  if (transaction === 'callers') await unique.releaseSavepoint(db, 'batch');
  return outcomes;
}

/** The keys in key order, in runs that insert and read without locks; the `'replace'` rewrites last. */
async function settleInOrder(
  queries: JobQueries,
  db: Queryable,
  steps: Steps,
  acting: readonly NewUniqueJob[],
): Promise<Map<string, KeyOutcome>> {
  // As 'skip': a run reads holders without locking them.
  const keys = sortedByKey(acting).map((job) =>
    job.unique.replace ? { ...job, unique: { ...job.unique, replace: false } } : job,
  );
  const positions = new Map(keys.map((job, i) => [job, i]));
  const outcomes = new Map<string, KeyOutcome>();
  let from = 0;
  let to = keys.length;
  while (from < keys.length) {
    const run = keys.slice(from, to);
    let first = to;
    const settled = await steps.run(from === 0 ? 'batch' : 'keys', async (settled) => {
      first = to;
      // A key alone waits only for itself: its rounds need no undo.
      if (run.length === 1) await settleInto(queries, db, run, settled);
      else
        for (const job of await attempt(queries, db, run, settled))
          first = Math.min(first, positions.get(job)!);
      return first === to;
    });
    if (settled) {
      for (const [key, outcome] of settled) outcomes.set(key, outcome);
      from = to;
      to = keys.length;
    } else to = first === from ? from + 1 : first;
  }
  const rewrites = acting.filter((job) => job.unique.replace && !outcomes.get(job.unique.key)!.inserted);
  if (rewrites.length === 0) return outcomes;
  // A holder gone since its run read it (it ran, and was deleted on success)
  // keeps what that read found: the call left a running job alone.
  const rewritten = await steps.run('keys', async (settled) => {
    for (const row of await queries.insert.unique.resolve(db, rewrites))
      settled.set(row.unique_key, { row, inserted: false });
    return true;
  });
  for (const [key, outcome] of rewritten!) outcomes.set(key, outcome);
  return outcomes;
}

/**
 * Steps of a batch, each under a savepoint: kept when it settles, undone when
 * it does not (or when the database failed it to break a deadlock, then tried
 * again after a pause).
 */
class Steps {
  readonly #queries: JobQueries;
  readonly #db: Queryable;
  #deadlocks = 0;

  constructor(queries: JobQueries, db: Queryable) {
    this.#queries = queries;
    this.#db = db;
  }

  /**
   * Runs `step` under the savepoint `mark` (`'batch'` is already set, and
   * stays); returns what it settled, or undefined (all undone) when it says
   * it did not settle.
   *
   * @throws {DatabaseError} 40P01 after {@link MAX_DEADLOCK_RETRIES} deadlocks, or any other error.
   */
  async run(
    mark: UniqueSavepoint,
    step: (settled: Map<string, KeyOutcome>) => Promise<boolean>,
  ): Promise<Map<string, KeyOutcome> | undefined> {
    const unique = this.#queries.insert.unique;
    for (;;) {
      if (mark === 'keys') await unique.savepoint(this.#db, mark);
      const settled = new Map<string, KeyOutcome>();
      let done: boolean;
      try {
        done = await step(settled);
      } catch (error) {
        if (!isDeadlock(error)) throw error;
        // A deadlock the database broke by failing this statement: with a worker
        // finishing a holder, or with a transaction that took keys out of order
        // across its calls. Undone, the other side goes on; after a pause (so it
        // takes first what this step let go of), the step is tried again.
        await this.#undo(mark);
        if (++this.#deadlocks > MAX_DEADLOCK_RETRIES) throw error;
        await deadlockPause(this.#deadlocks);
        continue;
      }
      if (!done) {
        await this.#undo(mark);
        return undefined;
      }
      if (mark === 'keys') await unique.releaseSavepoint(this.#db, mark);
      return settled;
    }
  }

  async #undo(mark: UniqueSavepoint): Promise<void> {
    const unique = this.#queries.insert.unique;
    await unique.rollbackToSavepoint(this.#db, mark);
    if (mark === 'keys') await unique.releaseSavepoint(this.#db, mark);
  }
}

/** The jobs in the order the statements take their keys: `COLLATE "C"`, the bytes of the UTF-8 text. */
function sortedByKey(jobs: readonly NewUniqueJob[]): NewUniqueJob[] {
  return jobs
    .map((job) => ({ job, bytes: Buffer.from(job.unique.key, 'utf8') }))
    .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    .map((entry) => entry.job);
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
