/**
 * Writes handler results in batches, each fenced by the lease: one statement
 * for the successes and one for the failures of whatever finished while the
 * previous batch was being written. A result whose lease was reclaimed changes
 * nothing and is reported as stale.
 *
 * A write whose answer is lost (connection dropped, deadlock, serialization
 * failure) may or may not have committed. Before sending it again, the
 * completer reads where each job stands: a result this lease already wrote
 * counts as written, a lease still held is written again, and only a lease
 * that is gone is stale.
 *
 * A job whose cancel was requested is left alone by the success and failure
 * statements; the completer then ends it with the cancel statement (also
 * fenced by the lease), so it ends `cancelled` whatever its handler returned.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isTransient, translateError } from '../db/executor.js';
import { type LeasedJob, leaseKey } from '../db/queries/job-row.js';
import type { FailedJob, FailureOutcome, LeaseState } from '../db/queries/results.js';
import type { SkiplockError } from '../errors.js';
import { loopBackoffMs } from './loop-backoff.js';

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

/** What the completer needs from its worker. */
export interface CompleterDeps<T extends LeasedJob> {
  complete(jobs: T[]): Promise<Set<string>>;
  fail(failures: FailedJob[]): Promise<FailureOutcome[]>;
  /** Ends held jobs whose cancel was requested as `cancelled`; returns the lease keys it ended (none when absent). */
  cancel?(jobs: T[]): Promise<Set<string>>;
  /** Where these jobs stand now; read before a write whose answer was lost is sent again. */
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

export class Completer<T extends LeasedJob> {
  readonly #deps: CompleterDeps<T>;
  #successes: T[] = [];
  #failures: FailureToWrite<T>[] = [];
  #flushing: Promise<void> | undefined;
  #giveUp = false;

  constructor(deps: CompleterDeps<T>) {
    this.#deps = deps;
  }

  /** Number of results not yet written. */
  get backlog(): number {
    return this.#successes.length + this.#failures.length;
  }

  /** Queues a success. */
  succeeded(job: T): void {
    this.#successes.push(job);
    this.#schedule();
  }

  /** Queues a failure. */
  failed(failure: FailureToWrite<T>): void {
    this.#failures.push(failure);
    this.#schedule();
  }

  #schedule(): void {
    this.#flushing ??= this.#flush().finally(() => {
      this.#flushing = undefined;
    });
  }

  async #flush(): Promise<void> {
    // Handlers that settle in this turn of the event loop join the first batch.
    await new Promise((resolve) => setImmediate(resolve));
    while (this.backlog > 0) {
      const successes = this.#successes.splice(0, MAX_BATCH);
      const failures = this.#failures.splice(0, MAX_BATCH);
      await Promise.all([
        successes.length > 0 ? this.#writeSuccesses(successes) : undefined,
        failures.length > 0 ? this.#writeFailures(failures) : undefined,
      ]);
      this.#deps.onBatchWritten?.();
    }
  }

  async #writeSuccesses(batch: T[]): Promise<void> {
    let pending = batch;
    await this.#retrying(async (retry) => {
      if (retry) {
        pending = await this.#unwritten(
          pending,
          (state) => this.#deps.successLeavesRow && state.status === 'succeeded',
          (job) => this.#deps.onSuccess(job),
        );
      }
      if (pending.length === 0) return;
      const completed = await this.#deps.complete(pending);
      const missed: T[] = [];
      for (const job of pending) {
        if (completed.has(leaseKey(job))) this.#deps.onSuccess(job);
        else missed.push(job);
      }
      pending = missed;
      await this.#cancelOrStale(missed);
    });
  }

  /** Jobs a result statement left alone: cancelled when their cancel was requested, else stale. */
  async #cancelOrStale(jobs: T[]): Promise<void> {
    if (jobs.length === 0) return;
    const cancelled = (await this.#deps.cancel?.(jobs)) ?? new Set<string>();
    for (const job of jobs) {
      if (cancelled.has(leaseKey(job))) this.#deps.onCancelled?.(job);
      else this.#deps.onStale(job);
    }
  }

  async #writeFailures(batch: FailureToWrite<T>[]): Promise<void> {
    let pending = batch;
    await this.#retrying(async (retry) => {
      if (retry) {
        const byId = new Map(pending.map((f) => [f.job.id, f]));
        const jobs = await this.#unwritten(
          pending.map((f) => f.job),
          (state) => state.status !== 'running',
          (job, state) =>
            this.#deps.onFailure(byId.get(job.id)!, {
              id: job.id,
              attempts: job.attempts,
              leaseSeq: job.leaseSeq,
              status: state!.status as FailureOutcome['status'],
              queue: state!.queue,
              retryDelayMs: state!.retryDelayMs,
            }),
          true,
        );
        pending = jobs.map((j) => byId.get(j.id)!);
      }
      if (pending.length === 0) return;
      const outcomes = await this.#deps.fail(
        pending.map((f) => ({
          id: f.job.id,
          attempts: f.job.attempts,
          leaseSeq: f.job.leaseSeq,
          error: f.error,
          permanent: f.permanent,
          snoozeDelayMs: f.snoozeDelayMs,
          retryDelayMs: f.retryDelayMs,
        })),
      );
      const byKey = new Map(outcomes.map((o) => [leaseKey(o), o]));
      const missed: FailureToWrite<T>[] = [];
      for (const f of pending) {
        const outcome = byKey.get(leaseKey(f.job));
        if (outcome) this.#deps.onFailure(f, outcome);
        else missed.push(f);
      }
      pending = missed;
      await this.#cancelOrStale(missed.map((f) => f.job));
    });
  }

  /**
   * After a lost answer: reports the jobs whose result this lease already wrote
   * (`written(state)`, or an absent row when `absentIsStale` is false) and the
   * ones whose lease is gone, and returns those still held, to write again.
   */
  async #unwritten(
    jobs: T[],
    written: (state: LeaseState) => boolean,
    onWritten: (job: T, state: LeaseState | undefined) => void,
    absentIsStale = false,
  ): Promise<T[]> {
    const states = new Map((await this.#deps.leaseStates(jobs.map((j) => j.id))).map((s) => [s.id, s]));
    const held: T[] = [];
    for (const job of jobs) {
      const state = states.get(job.id);
      if (!state) {
        if (absentIsStale) this.#deps.onStale(job);
        else onWritten(job, undefined);
      } else if (state.leaseSeq !== job.leaseSeq) {
        this.#deps.onStale(job);
      } else if (state.status === 'running' && state.lockedBy === this.#deps.workerId) {
        held.push(job);
      } else if (state.status === 'cancelled') {
        this.#deps.onCancelled?.(job);
      } else if (written(state)) {
        onWritten(job, state);
      } else {
        this.#deps.onStale(job);
      }
    }
    return held;
  }

  /** Runs `write` until it succeeds; `retry` is true after a failed try. Gives up as described on the class. */
  async #retrying(write: (retry: boolean) => Promise<void>): Promise<void> {
    let attempt = 0;
    let permanentErrors = 0;
    for (;;) {
      try {
        await write(attempt > 0);
        return;
      } catch (error) {
        const translated = translateError(error);
        this.#deps.onError(translated);
        if (!isTransient(translated)) permanentErrors++;
        // Give up only when retrying cannot help, or when shutting down past its deadline:
        // the sweeper brings the jobs back after the visibility timeout (at-least-once).
        if (permanentErrors >= MAX_PERMANENT_ERRORS || this.#giveUp) return;
        await sleep(loopBackoffMs(attempt++));
      }
    }
  }

  /** Resolves when every queued result is written, or after `timeoutMs` (then stops retrying). */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (this.#flushing) {
      const remaining = deadline - performance.now();
      if (remaining <= 0) {
        this.#giveUp = true;
        return;
      }
      const timeout = new AbortController();
      await Promise.race([
        this.#flushing,
        sleep(remaining, undefined, { signal: timeout.signal }).catch(() => {}),
      ]);
      timeout.abort();
    }
  }
}
