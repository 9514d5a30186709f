/**
 * Writes handler results in batches: whatever finished while the previous
 * batch was being written goes in the next, successes and failures together,
 * as one finish statement (finish.ts), each result fenced by its lease. A
 * result whose lease was reclaimed changes nothing and is reported stale; a
 * job whose cancel was requested ends `cancelled` in the same statement.
 *
 * Modes: waiting (nothing to write, until a result wakes it), writing (one
 * batch at a time), reading (after a write whose answer was lost, or that left
 * jobs alone: where those jobs stand decides — a result this lease already
 * wrote counts as written, a lease still held is written again, a lease that
 * is gone is stale), and stopping ({@link Completer.drain}: writes what is
 * queued within a deadline, then gives up, leaving the jobs to the sweeper).
 * {@link resultWriter} wires one to a worker: its statements and its events.
 */
import type pg from 'pg';
import { isRowDataError, isTransient, translateError } from '../db/executor.js';
import type { AttemptResult, FinishedJob, FinishingJob, SuccessPolicy } from '../db/queries/finish.js';
import { type LeasedJob, leaseKey } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { LeaseState } from '../db/queries/results.js';
import type { SkiplockError } from '../errors.js';
import { type Clock, sleep } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';
import type { EventReporter } from './events.js';
import type { Execution } from './executions.js';
import { loopBackoffMs, SizeCap } from './loop-backoff.js';

/** A failed attempt to write: what the handler threw, the text stored, and whether it is permanent. */
export interface FailureToWrite<T> {
  job: T;
  thrown: unknown;
  error: string;
  permanent: boolean;
  /** Set when the handler snoozed the job: milliseconds until it is due again. */
  snoozeDelayMs?: number | undefined;
  /** Milliseconds until the retry, from the kind's backoff; undefined for the default rule. */
  retryDelayMs?: number | undefined;
}

/** What a failure's write left: the job's status, queue and the milliseconds until it is due again. */
export interface FailureOutcome {
  status: 'queued' | 'failed' | 'dead';
  queue: string;
  /** Milliseconds until the retry or the snoozed job is due (0 when it ended). */
  retryDelayMs: number;
}

/** What the completer needs from its worker. */
export interface CompleterDeps<T extends LeasedJob> {
  /** Writes a batch with one finish statement; returns what it wrote by lease key. */
  finish(jobs: FinishingJob[]): Promise<Map<string, FinishedJob>>;
  /** Where these jobs stand now; read before jobs a write did not settle are written again. */
  leaseStates(ids: string[]): Promise<LeaseState[]>;
  /** The worker id that holds these leases. */
  workerId: string;
  /** What a committed success leaves in the table: nothing, or a `succeeded` row. */
  successLeavesRow: boolean;
  onSuccess(job: T): void;
  onFailure(failure: FailureToWrite<T>, outcome: FailureOutcome): void;
  onStale(job: T): void;
  /** A batch was written (or given up): the worker may claim again. */
  onBatchWritten?(): void;
  onCancelled?(job: T): void;
  onError(error: SkiplockError): void;
}

/** Most results written by one statement. */
const MAX_BATCH = 1000;

/** Non-transient errors after which a batch is given up (its jobs are reclaimed by the sweeper later). */
const MAX_PERMANENT_ERRORS = 5;

/** Writes of jobs a write left alone while their lease was still held, before they count as stale. */
const MAX_REWRITES = 3;

/** What a success writes beside the status: the result to store, and the job's own success policy. */
export interface SuccessToWrite {
  /** The handler's return value as JSON text; stored when the row outlives the success. */
  result?: string | undefined;
  /** The job's own success policy; undefined: the worker's. */
  onSuccess?: SuccessPolicy | undefined;
}

/** One queued result: the job, and its failure when it failed (or what its success writes). */
interface Pending<T> {
  job: T;
  failure: FailureToWrite<T> | undefined;
  success?: SuccessToWrite | undefined;
}

/** The completer of one worker: a {@link Service} that writes what `succeeded` and `failed` queue. */
export class Completer<T extends LeasedJob> extends Service {
  readonly #deps: CompleterDeps<T>;
  #queued: Pending<T>[] = [];
  /** Set by a drain past its deadline: stop retrying. */
  readonly #giveUp = new AbortController();
  /** The most results one statement may write, after writes that timed out (large results, a low `statement_timeout`). */
  readonly #sizeCap: SizeCap;

  /** @param clock - the clock retries wait on; defaults to the process's. */
  constructor(deps: CompleterDeps<T>, clock?: Clock) {
    super(clock);
    this.#deps = deps;
    this.#sizeCap = new SizeCap(this.clock, MAX_BATCH);
  }

  /** Number of results waiting for the next batch (the batch being written is not counted). */
  get backlog(): number {
    return this.#queued.length;
  }

  /** Queues a success; `success` carries its result and the job's own policy, when any. */
  succeeded(job: T, success?: SuccessToWrite): void {
    this.#queued.push(success ? { job, failure: undefined, success } : { job, failure: undefined });
    this.wake();
  }

  /** Queues a failure (or a snooze). */
  failed(failure: FailureToWrite<T>): void {
    this.#queued.push({ job: failure.job, failure });
    this.wake();
  }

  protected async run(): Promise<void> {
    for (;;) {
      if (this.#queued.length === 0) {
        if (this.stopped) return;
        await this.wait(Number.POSITIVE_INFINITY);
        continue;
      }
      // Handlers that settle in this turn of the event loop join the batch.
      await new Promise((resolve) => setImmediate(resolve));
      await this.#write(this.#queued.splice(0, Math.min(MAX_BATCH, this.#sizeCap.value)));
      this.#deps.onBatchWritten?.();
    }
  }

  /**
   * Resolves when every queued result is written, or after `timeoutMs` on the
   * clock (then stops retrying; the jobs left come back through the sweeper).
   * The completer then stops (one never started writes what is queued first).
   */
  async drain(timeoutMs: number): Promise<void> {
    if (this.state === 'new' && this.backlog > 0) this.start();
    const stopping = this.stop();
    const deadline = new AbortController();
    let timedOut = false;
    await Promise.race([
      stopping,
      sleep(this.clock, timeoutMs, deadline.signal).then(() => {
        timedOut = !deadline.signal.aborted;
      }),
    ]);
    deadline.abort();
    if (timedOut) this.#giveUp.abort();
  }

  /** Writes one batch until each job is written, stale, or given up. */
  async #write(batch: Pending<T>[]): Promise<void> {
    let pending = batch;
    /** Why the jobs' states are read before the next write: an answer was lost, or the write left them alone. */
    let read: 'lost' | 'missed' | undefined;
    let misses = 0;
    let tries = 0;
    let permanentErrors = 0;
    while (pending.length > 0) {
      try {
        if (read) pending = await this.#unwritten(pending, read === 'lost', misses > MAX_REWRITES);
        read = undefined;
        if (pending.length === 0) return;
        // After a write timed out, what is left waits for the next batches, at the front.
        if (pending.length > this.#sizeCap.value)
          this.#queued.unshift(...pending.splice(this.#sizeCap.value));
        const written = await this.#sizeCap.watch(pending.length, this.#deps.finish(pending.map(finishing)));
        const missed: Pending<T>[] = [];
        for (const p of pending) {
          const row = written.get(leaseKey(p.job));
          if (row) this.#report(p, row);
          else missed.push(p);
        }
        // Left alone: a lease that is gone, or (rarely) a cancel requested while the write ran.
        pending = missed;
        read = 'missed';
        misses++;
      } catch (error) {
        const translated = translateError(error);
        this.#deps.onError(translated);
        // One job's value (a result the server refuses, say) fails the whole statement: write
        // the halves apart, so that the results finished beside it are not held back with it.
        if (isRowDataError(translated)) {
          if (pending.length > 1) {
            this.#queued.unshift(...pending.splice(Math.ceil(pending.length / 2)));
            continue;
          }
          // Alone, it fails the same way every time. A success or snooze PostgreSQL refuses
          // (a result that changed after it was checked) is written as a failure that says
          // why; a failure that cannot be written is given up, left to the sweeper.
          const [p] = pending as [Pending<T>];
          if (p.failure && p.failure.snoozeDelayMs === undefined) return;
          const error = `its outcome could not be stored: ${translated.message}`;
          pending = [{ job: p.job, failure: { job: p.job, thrown: translated, error, permanent: false } }];
          continue;
        }
        if (!isTransient(translated)) permanentErrors++;
        // Give up only when retrying cannot help, or when shutting down past its deadline:
        // the sweeper brings the jobs back after the visibility timeout (at-least-once).
        if (permanentErrors >= MAX_PERMANENT_ERRORS || this.#giveUp.signal.aborted) return;
        await sleep(this.clock, loopBackoffMs(tries++), this.#giveUp.signal);
        if (this.#giveUp.signal.aborted) return;
        // The write may have committed; a read that failed may have been after a write that left jobs alone.
        if (read !== 'missed') read = 'lost';
      }
    }
  }

  /** Reports what the finish statement wrote for `p`. */
  #report(p: Pending<T>, row: FinishedJob): void {
    if (row.outcome === 'cancelled') this.#deps.onCancelled?.(p.job);
    else if (!p.failure || row.outcome === 'succeeded') this.#deps.onSuccess(p.job);
    else
      this.#deps.onFailure(p.failure, {
        status: row.outcome === 'failed' || row.outcome === 'dead' ? row.outcome : 'queued',
        queue: row.queue,
        retryDelayMs: row.retryDelayMs,
      });
  }

  /**
   * Reads where the jobs stand and returns those still held, to write again
   * (none when `giveUp`: they are reported stale). After a lost answer
   * (`lost`), a result this lease already wrote is reported as written; after
   * a write that left jobs alone, whatever else happened to them was someone
   * else's doing, so they are stale.
   */
  async #unwritten(pending: Pending<T>[], lost: boolean, giveUp: boolean): Promise<Pending<T>[]> {
    const states = new Map(
      (await this.#deps.leaseStates(pending.map((p) => p.job.id))).map((s) => [s.id, s]),
    );
    const held: Pending<T>[] = [];
    for (const p of pending) {
      const state = states.get(p.job.id);
      const ours = state?.leaseSeq === p.job.leaseSeq;
      if (ours && state?.status === 'running' && state.lockedBy === this.#deps.workerId && !giveUp) {
        held.push(p);
      } else if (!lost || (state && !ours)) {
        this.#deps.onStale(p.job);
      } else if (!state) {
        // A running job leaves the table only by its lease's success (delete, archive).
        if (p.failure) this.#deps.onStale(p.job);
        else this.#deps.onSuccess(p.job);
      } else if (state.status === 'cancelled') {
        this.#deps.onCancelled?.(p.job);
      } else if (
        !p.failure &&
        (this.#deps.successLeavesRow || p.success?.onSuccess === 'keep') &&
        state.status === 'succeeded'
      ) {
        this.#deps.onSuccess(p.job);
      } else if (
        p.failure &&
        (state.status === 'queued' || state.status === 'failed' || state.status === 'dead')
      ) {
        this.#deps.onFailure(p.failure, {
          status: state.status,
          queue: state.queue,
          retryDelayMs: state.retryDelayMs,
        });
      } else {
        this.#deps.onStale(p.job);
      }
    }
    return held;
  }
}

/**
 * The finish statement's view of a queued result. Built key by key, not by
 * spreading: a spread of objects of varying shapes is a slow copy in V8, and
 * this runs once per job.
 */
function finishing<T extends LeasedJob>(p: Pending<T>): FinishingJob {
  const { id, attempts, leaseSeq } = p.job;
  const { failure, success } = p;
  if (success)
    return {
      id,
      attempts,
      leaseSeq,
      outcome: 'succeeded',
      result: success.result,
      onSuccess: success.onSuccess,
    };
  if (!failure) return { id, attempts, leaseSeq, outcome: 'succeeded' };
  if (failure.snoozeDelayMs !== undefined)
    return { id, attempts, leaseSeq, outcome: 'snoozed', delayMs: failure.snoozeDelayMs };
  return {
    id,
    attempts,
    leaseSeq,
    outcome: 'failed',
    error: failure.error,
    permanent: failure.permanent,
    retryDelayMs: failure.retryDelayMs,
  };
}

/** The attempt result of a failure to write (a success when there is none). */
export function attemptResult(
  failure: Omit<FailureToWrite<unknown>, 'job' | 'thrown'> | undefined,
): AttemptResult {
  if (!failure) return { outcome: 'succeeded' };
  if (failure.snoozeDelayMs !== undefined) return { outcome: 'snoozed', delayMs: failure.snoozeDelayMs };
  return {
    outcome: 'failed',
    error: failure.error,
    permanent: failure.permanent,
    retryDelayMs: failure.retryDelayMs,
  };
}

/** What the result writer needs from its worker. */
export interface ResultWriterDeps {
  queries: JobQueries;
  pool: Pick<pg.Pool, 'query'>;
  workerId: string;
  onSuccess: SuccessPolicy;
  events: EventReporter;
  /** A job of this worker's queues is due again in this many milliseconds (a retry, a snooze). */
  wakeAfter(delayMs: number): void;
  /** A batch of results was written: the worker may claim again. */
  onBatchWritten(): void;
  /** The clock the completer's retries and its stop deadline read. */
  clock: Clock;
}

/** The worker's completer: the finish statement, and the worker's events for each outcome. */
export function resultWriter(deps: ResultWriterDeps): Completer<Execution> {
  const { queries, pool, workerId, events } = deps;
  return new Completer<Execution>(
    {
      finish: (jobs) => queries.finish.finish(pool, jobs, workerId, deps.onSuccess),
      leaseStates: (ids) => queries.results.leaseStates(pool, ids),
      workerId,
      successLeavesRow: deps.onSuccess === 'keep',
      onSuccess: (e) => reportSuccess(events, e),
      onFailure: (failure, outcome) => {
        if (outcome.status === 'queued') deps.wakeAfter(outcome.retryDelayMs);
        if (failure.snoozeDelayMs !== undefined) {
          events.emit('job:snoozed', failure.job.job, { delayMs: outcome.retryDelayMs });
          return;
        }
        events.emit('job:failure', failure.job.job, failure.thrown, {
          status: outcome.status,
          retryDelayMs: outcome.retryDelayMs,
          lastError: failure.error,
        });
      },
      onCancelled: (e) => events.emit('job:cancelled', e.job),
      onStale: (e) => events.emit('job:stale', e.job),
      onBatchWritten: deps.onBatchWritten,
      onError: (error) => events.error(error, 'complete'),
    },
    deps.clock,
  );
}

/** Emits `job:success` for a job whose success was committed. */
export function reportSuccess(events: EventReporter, e: Execution): void {
  if (!events.heard('job:success')) return;
  const startedAt = performance.timeOrigin + e.startedAt;
  events.emit('job:success', e.job, {
    durationMs: performance.now() - e.startedAt,
    waitMs: Math.max(0, startedAt - e.job.runAt.getTime()),
  });
}
