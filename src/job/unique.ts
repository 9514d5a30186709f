/**
 * Unique keys: the options a producer gives, their rules, and what an enqueue
 * with a key returns. Pure: no I/O. The database enforces the key (one unique
 * index), so it holds across processes, hosts, batches and plain SQL inserts.
 */
import { ValidationError } from '../errors.js';
import { JOB_STATUSES, type Job, type JobStatus } from './job.js';

/** Statuses in which a job holds its unique key when none are given. */
export const DEFAULT_UNIQUE_STATES: readonly JobStatus[] = ['queued', 'running'];

/** What an enqueue does when the key is held by another job. */
export type ConflictMode = 'skip' | 'replace';

/** The unique-key options of one enqueued job. */
export interface UniqueOptions {
  /**
   * At most one job holds this key at a time (any non-empty text). A job holds
   * its key from its insert while its status stays in `uniqueStates`; the first
   * time it leaves them, or when the job is deleted, the key is free again, and
   * the job does not take it back (a requeued job runs without it).
   * @default none (no key)
   */
  uniqueKey?: string | undefined;
  /**
   * Statuses in which the job holds its key. Must include `'queued'`: a job is
   * inserted queued. Add `'succeeded'` (with `onSuccess: 'keep'`), `'failed'`
   * or `'dead'` to refuse a new job while a finished one is kept.
   * @default ['queued', 'running']
   */
  uniqueStates?: JobStatus[] | undefined;
  /**
   * When another job holds the key: `'skip'` inserts nothing and returns that
   * job (`duplicate: true`); `'replace'` also rewrites its payload, run_at,
   * priority and max_attempts if it is still `queued` (debounce), and leaves a
   * running one alone. In `enqueueMany`, a key's earlier item counts as that
   * other job, as if each item were its own `enqueue` call, one after another.
   * @default 'skip'
   */
  onConflict?: ConflictMode | undefined;
}

/** A job as an enqueue returned it: the inserted job, or the one that held its unique key. */
export interface EnqueuedJob<Kind extends string = string, Payload = unknown> extends Job<Kind, Payload> {
  /**
   * True when nothing was inserted because another job held the unique key
   * (in `enqueueMany`, also the job an earlier item of the batch inserted);
   * the fields are then that job's as this call left it (after a `'replace'`,
   * its new values). Always false for a job without a key.
   */
  duplicate: boolean;
}

/** A job's unique key, as validated. */
export interface UniqueSpec {
  key: string;
  /** PostgreSQL array text of the statuses, such as `{queued,running}`. */
  statesText: string;
  replace: boolean;
}

/** Longest unique key, in UTF-8 bytes: it must fit a btree index entry. */
export const MAX_UNIQUE_KEY_BYTES = 2048;

/**
 * Checks the unique options of one job; `prefix` is the field prefix
 * (`options.` or `jobs[3].`).
 *
 * @returns the key to insert, or undefined for a job without one.
 * @throws {ValidationError} naming the field: an empty, unstorable or too long
 *   key; states that are not statuses or lack `'queued'`; a mode other than
 *   `'skip'`/`'replace'`; `uniqueStates` or `onConflict` without `uniqueKey`.
 */
export function toUniqueSpec(options: UniqueOptions, prefix: string): UniqueSpec | undefined {
  const { uniqueKey, uniqueStates, onConflict } = options;
  if (uniqueKey === undefined) {
    if (uniqueStates !== undefined) throw new ValidationError(`${prefix}uniqueStates`, 'needs a uniqueKey');
    if (onConflict !== undefined) throw new ValidationError(`${prefix}onConflict`, 'needs a uniqueKey');
    return undefined;
  }
  const keyField = `${prefix}uniqueKey`;
  if (typeof uniqueKey !== 'string') throw new ValidationError(keyField, 'must be a string');
  if (uniqueKey.length === 0) throw new ValidationError(keyField, 'must not be empty');
  if (uniqueKey.includes('\u0000') || !uniqueKey.isWellFormed())
    throw new ValidationError(keyField, 'must be valid text without NUL');
  if (Buffer.byteLength(uniqueKey, 'utf8') > MAX_UNIQUE_KEY_BYTES)
    throw new ValidationError(keyField, `must be at most ${MAX_UNIQUE_KEY_BYTES} bytes of UTF-8`);
  const states = uniqueStates ?? DEFAULT_UNIQUE_STATES;
  const statesField = `${prefix}uniqueStates`;
  if (!Array.isArray(states) || states.length === 0)
    throw new ValidationError(statesField, 'must be a non-empty array of statuses');
  states.forEach((state, i) => {
    if (!(JOB_STATUSES as readonly unknown[]).includes(state))
      throw new ValidationError(`${statesField}[${i}]`, `must be one of ${JOB_STATUSES.join(', ')}`);
  });
  if (!states.includes('queued'))
    throw new ValidationError(statesField, "must include 'queued' (a job holds its key from its insert)");
  if (onConflict !== undefined && onConflict !== 'skip' && onConflict !== 'replace')
    throw new ValidationError(`${prefix}onConflict`, "must be 'skip' or 'replace'");
  return {
    key: uniqueKey,
    statesText: `{${[...new Set(states)].join(',')}}`,
    replace: onConflict === 'replace',
  };
}
