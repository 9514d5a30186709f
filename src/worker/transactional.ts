/**
 * One attempt of a transactional handler: BEGIN on a connection of the
 * transactional pool, the handler with that connection, the job's completion
 * (the finish statement, fenced by its lease, by the `onSuccess` policy) on
 * the same connection, then COMMIT. The handler's writes and the job's
 * completion commit together or not at all:
 *
 * - the handler throws, times out, is cancelled or stopped, or the lease was
 *   lost: the transaction rolls back and the attempt ends as any other does
 *   (a failure is written by the completer; a lost lease is stale);
 * - the completion writes no success (lease reclaimed, or cancel requested):
 *   the transaction rolls back; the job is ended `cancelled` when its cancel
 *   was requested, else reported stale;
 * - COMMIT's answer is lost: where the job stands tells whether it committed,
 *   as the completer tells for its own lost answers, read once that COMMIT
 *   ended (the read waits for the row's lock).
 *
 * When the signal fires the handler may still be running, so its connection
 * is dropped at once: the server rolls the transaction back, and the handler's
 * later statements fail instead of running outside the transaction.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { isTransient, translateError } from '../db/executor.js';
import { guardedClient, transactionEnded } from '../db/guarded-client.js';
import { HeldTransaction } from '../db/held-transaction.js';
import type { FinishingJob, SuccessPolicy } from '../db/queries/finish.js';
import { type LeasedJob, leaseKey } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { LeaseState } from '../db/queries/results.js';
import { SettledLeaseQueries } from '../db/queries/settled-lease.js';
import { successToWrite } from '../workflow/job-output.js';
import type { ProgressSink } from '../workflow/progress-writer.js';
import { reportSuccess, type SuccessToWrite } from './completer.js';
import type { EventReporter } from './events.js';
import type { Execution } from './executions.js';
import { type AttemptArgs, failure, permanentFailure, type RunOutcome, runJob } from './executor.js';
import type { TransactionalHandler } from './handler-definition.js';
import { loopBackoffMs } from './loop-backoff.js';
import type { ResolvedWorkerOptions } from './options.js';
import { transactionPool, type WorkerPool } from './worker-pool.js';

/** What transactional attempts need from their worker. */
export interface WorkerSide {
  /** The worker's own pool, for reads and writes outside the handler's transaction. */
  workerPool: Pick<pg.Pool, 'query'>;
  queries: JobQueries;
  workerId: string;
  events: EventReporter;
  /** Where handlers' `progress` and `log` write. */
  progressSink?: ProgressSink;
}

interface TransactionalDeps extends WorkerSide {
  /** The transactional handlers' pool: one connection per slot. */
  pool: pg.Pool;
  settledLease: SettledLeaseQueries;
  onSuccess: SuccessPolicy;
  /** Largest result stored, in bytes of JSON (worker option `maxResultBytes`). */
  maxResultBytes: number;
  /** Deadline of BEGIN, the completion, COMMIT and ROLLBACK, in milliseconds. */
  statementTimeoutMs: number;
  /** The worker closed its pools: reads after a lost COMMIT answer stop (the sweeper settles the job). */
  closed: boolean;
}

/** A worker's transactional attempts and the pool they run on. */
export class TransactionalAttempts {
  readonly #deps: TransactionalDeps;
  readonly #pool: WorkerPool;

  private constructor(deps: TransactionalDeps, pool: WorkerPool) {
    this.#deps = deps;
    this.#pool = pool;
  }

  /**
   * The transactional attempts of a worker, with a pool of `concurrency`
   * connections of their own; undefined when no handler is transactional.
   */
  static forWorker(
    clientConfig: pg.ClientConfig,
    options: ResolvedWorkerOptions,
    side: WorkerSide,
  ): TransactionalAttempts | undefined {
    if (![...options.handlers.values()].some((h) => h.transactional)) return undefined;
    const { concurrency, statementTimeoutMs, sessionSettings, onSuccess, maxResultBytes } = options;
    const pool = transactionPool(clientConfig, concurrency, statementTimeoutMs, sessionSettings);
    const settledLease = new SettledLeaseQueries(side.queries.names);
    return new TransactionalAttempts(
      {
        ...side,
        pool: pool.pool,
        settledLease,
        onSuccess,
        maxResultBytes,
        statementTimeoutMs,
        closed: false,
      },
      pool,
    );
  }

  /** Runs one attempt (see {@link runTransactional}). */
  run(
    e: Execution,
    handle: TransactionalHandler<string, unknown>,
    timeoutMs: number | undefined,
  ): Promise<RunOutcome | null> {
    return runTransactional(this.#deps, e, handle, timeoutMs);
  }

  /** Closes the pool within `timeoutMs` (see {@link WorkerPool.close}). */
  close(timeoutMs: number): Promise<void> {
    this.#deps.closed = true;
    return this.#pool.close(timeoutMs);
  }
}

/** Reads of where a job stands after a lost COMMIT answer before the sweeper is left to settle it. */
const LEASE_STATE_TRIES = 10;

/**
 * Runs one transactional attempt of the running execution `e`.
 *
 * @returns the outcome for the worker to settle as usual (a failure, or an
 *   outcome the worker discards because the lease was lost or released), or
 *   null when the attempt was settled and reported here (committed, stale or
 *   cancelled).
 */
async function runTransactional(
  deps: TransactionalDeps,
  e: Execution,
  handle: TransactionalHandler<string, unknown>,
  timeoutMs: number | undefined,
): Promise<RunOutcome | null> {
  const { signal } = e.control!;
  let tx: HeldTransaction;
  for (let failures = 0; ; failures++) {
    try {
      tx = await HeldTransaction.checkOut(deps.pool, deps.statementTimeoutMs, deps.workerPool);
      break;
    } catch (error) {
      // No connection (the server's or the role's limit, a restart): the handler has not
      // started, so the attempt is not charged; the job keeps its slot and lease, and
      // waits with the loops' backoff until a connection comes or it is aborted.
      if (signal.aborted) return failure(signal.reason);
      if (!isTransient(error)) return failure(error);
      deps.events.error(translateError(error), 'transaction');
      await sleep(loopBackoffMs(failures), undefined, { signal }).catch(() => {});
    }
  }
  const onAbort = () => tx.destroy(signal.reason, true);
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    try {
      await tx.begin();
    } catch (error) {
      return failure(signal.aborted ? signal.reason : error);
    }
    // Cancelled, stopped or reclaimed while the transaction opened: the handler does not start.
    if (signal.aborted) {
      onAbort();
      return failure(signal.reason);
    }
    const outcome = await runInTransaction(
      tx.client,
      handle,
      e.job,
      e.control!,
      timeoutMs,
      deps.progressSink,
      e,
    );
    if (!outcome.ok || e.state !== 'running' || signal.aborted) {
      await tx.rollback();
      return outcome;
    }
    let success: ReturnType<typeof successToWrite>;
    try {
      success = successToWrite(outcome.value, e.onSuccess, deps.onSuccess, deps.maxResultBytes);
    } catch (error) {
      await tx.rollback();
      return failure(error);
    }
    // The attempt is over: no heartbeat, cancel or stop touches it while its result commits.
    e.state = 'done';
    signal.removeEventListener('abort', onAbort);
    return await commitAttempt(deps, e, tx, success);
  } finally {
    signal.removeEventListener('abort', onAbort);
    tx.release();
  }
}

/** A lease to finish with an outcome that carries no values. */
export function finishing(lease: LeasedJob, outcome: 'succeeded' | 'cancelled'): FinishingJob {
  return { id: lease.id, attempts: lease.attempts, leaseSeq: lease.leaseSeq, outcome };
}

/**
 * Runs `handle` on `connection` (inside a transaction), guarded (see
 * guardedClient). A handler that ended the transaction itself fails without
 * retry, since a retry would repeat what it committed. Never rejects; the
 * caller rolls back or commits.
 */
export async function runInTransaction(
  connection: pg.PoolClient,
  handle: TransactionalHandler<string, unknown>,
  ...attempt: AttemptArgs
): Promise<RunOutcome> {
  const [, control] = attempt;
  const client = guardedClient(connection, control.signal);
  const outcome = await runJob((j, context) => handle(j, { ...context, client }), ...attempt);
  // Whatever the handler's outcome: a retry would repeat what it committed.
  const ended = transactionEnded(connection);
  return ended ? permanentFailure(ended) : outcome;
}

async function commitAttempt(
  deps: TransactionalDeps,
  e: Execution,
  tx: HeldTransaction,
  success: SuccessToWrite | undefined,
): Promise<RunOutcome | null> {
  let completed: boolean;
  try {
    const written = await tx.bounded(
      deps.queries.finish.finish(
        tx.client,
        [{ ...finishing(e, 'succeeded'), ...success }],
        deps.workerId,
        deps.onSuccess,
      ),
      'the completion',
    );
    // A cancelled job ends `cancelled` without the handler's writes: that is written after the rollback.
    completed = written.get(leaseKey(e))?.outcome === 'succeeded';
  } catch (error) {
    // Nothing commits (the handler left the transaction aborted, a deadlock, the connection broke).
    await tx.rollback();
    return failure(error);
  }
  if (!completed) {
    await tx.rollback();
    await cancelOrStale(deps, e);
    return null;
  }
  try {
    await tx.commit();
  } catch (error) {
    // A refusal (a deferred constraint) is the handler's failure; a lost answer is the worker's error too.
    const translated = translateError(error);
    if (isTransient(translated)) deps.events.error(translated, 'complete');
    return afterLostCommit(deps, e, translated);
  }
  reportSuccess(deps.events, e);
  return null;
}

/** A completion that missed its lease: the job ends `cancelled` when its cancel was requested, else it is stale. */
async function cancelOrStale(deps: TransactionalDeps, e: Execution): Promise<void> {
  try {
    const written = await deps.queries.finish.finish(
      deps.workerPool,
      [finishing(e, 'cancelled')],
      deps.workerId,
      deps.onSuccess,
    );
    deps.events.emit(written.has(leaseKey(e)) ? 'job:cancelled' : 'job:stale', e.job);
  } catch (error) {
    // The sweeper ends it after the visibility timeout (`cancelled`, as its cancel was requested).
    deps.events.error(translateError(error), 'complete');
  }
}

/**
 * COMMIT's answer was lost: reads where the job stands, once the COMMIT (if
 * the server got it) ended, to tell whether the transaction committed.
 */
async function afterLostCommit(
  deps: TransactionalDeps,
  e: Execution,
  commitError: unknown,
): Promise<RunOutcome | null> {
  for (let tries = 1; ; tries++) {
    let state: LeaseState | undefined;
    try {
      state = await deps.settledLease.settledState(deps.workerPool, e.id);
    } catch (error) {
      deps.events.error(translateError(error), 'complete');
      // Unknown: a job left running is reclaimed by the sweeper after the visibility timeout.
      if (tries >= LEASE_STATE_TRIES || deps.closed) return null;
      await sleep(loopBackoffMs(tries - 1));
      continue;
    }
    return settleByState(deps, e, state, commitError);
  }
}

function settleByState(
  deps: TransactionalDeps,
  e: Execution,
  state: LeaseState | undefined,
  commitError: unknown,
): RunOutcome | null {
  // A running job leaves the table only by its lease's completion (delete, archive).
  if (state === undefined || (state.leaseSeq === e.leaseSeq && state.status === 'succeeded')) {
    reportSuccess(deps.events, e);
    return null;
  }
  if (state.leaseSeq === e.leaseSeq && state.status === 'running' && state.lockedBy === deps.workerId) {
    // Not committed: the attempt failed, and the completer writes it (fenced, should the COMMIT still land).
    return failure(commitError);
  }
  const cancelled = state.leaseSeq === e.leaseSeq && state.status === 'cancelled';
  deps.events.emit(cancelled ? 'job:cancelled' : 'job:stale', e.job);
  return null;
}
