/**
 * The typed events a worker emits. Tests and the CLI wait on these instead of
 * sleeping; background loops report their errors here instead of throwing.
 */
import type { SkiplockError } from '../errors.js';
import type { Job } from '../job/job.js';

/** Which loop an `error` event came from. */
export type WorkerErrorSource = 'claim' | 'complete' | 'heartbeat' | 'sweep' | 'notifier' | 'release';

/** What a failed attempt led to, as written to the database. */
export interface FailureOutcomeInfo {
  /** `queued` (retry after backoff), `failed` (permanent error) or `dead` (out of attempts). */
  status: 'queued' | 'failed' | 'dead';
  /** Milliseconds until the retry is due (0 unless `queued`). */
  retryDelayMs: number;
}

/** Event name → listener arguments. */
export interface WorkerEvents {
  /** A handler is about to run a claimed job. */
  'job:start': [job: Job];
  /** A job's success was committed (deleted, kept or archived per `onSuccess`). */
  'job:success': [job: Job, info: { durationMs: number }];
  /** A job's failure was committed; `outcome` says what it became. */
  'job:failure': [job: Job, error: unknown, outcome: FailureOutcomeInfo];
  /** A result was not written because the lease had been reclaimed: the job's next attempt owns it. */
  'job:stale': [job: Job];
  /** On shutdown, an unfinished job was given back to `queued` without charging the attempt. */
  'job:released': [job: Job];
  /** A heartbeat found that a running job's lease had been reclaimed; its signal was aborted. */
  'lease:lost': [job: Job];
  /** A claim returned this many jobs (emitted only when > 0). */
  claim: [count: number];
  /** A sweep ran under the lock and reclaimed jobs (requeued, or dead when out of attempts). */
  sweep: [result: { requeued: number; dead: number }];
  /** The LISTEN connection is (re)established. */
  listen: [];
  /** A background loop hit an error; it retries by itself. */
  error: [error: SkiplockError, source: WorkerErrorSource];
  /** The worker stopped: no handler of it is running and its results are written. */
  stop: [];
}
