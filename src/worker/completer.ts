/**
 * Writes handler results in batches, each fenced by the lease: one statement
 * for the successes and one for the failures of whatever finished while the
 * previous batch was being written. A result whose lease was reclaimed changes
 * nothing and is reported as stale.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isTransient, translateError } from '../db/executor.js';
import { type FailureOutcome, type LeasedJob, leaseKey } from '../db/queries/jobs.js';
import type { SkiplockError } from '../errors.js';
import { loopBackoffMs } from './loop-backoff.js';

/** One finished attempt waiting to be written. */
export type Result<T extends LeasedJob> =
  | { job: T; ok: true }
  | { job: T; ok: false; error: string; permanent: boolean };

/** What the completer needs from its worker. */
export interface CompleterDeps<T extends LeasedJob> {
  complete(jobs: T[]): Promise<Set<string>>;
  fail(jobs: { job: T; error: string; permanent: boolean }[]): Promise<FailureOutcome[]>;
  onWritten(result: Result<T>, outcome: FailureOutcome | undefined): void;
  onStale(job: T): void;
  onError(error: SkiplockError): void;
}

/** Most results written by one statement. */
const MAX_BATCH = 1000;

/** Non-transient errors after which a batch is given up (its jobs are reclaimed by the sweeper later). */
const MAX_PERMANENT_ERRORS = 5;

export class Completer<T extends LeasedJob> {
  readonly #deps: CompleterDeps<T>;
  #pending: Result<T>[] = [];
  #flushing: Promise<void> | undefined;
  #giveUp = false;

  constructor(deps: CompleterDeps<T>) {
    this.#deps = deps;
  }

  /** Number of results not yet written. */
  get backlog(): number {
    return this.#pending.length;
  }

  push(result: Result<T>): void {
    this.#pending.push(result);
    this.#flushing ??= this.#flush().finally(() => {
      this.#flushing = undefined;
    });
  }

  async #flush(): Promise<void> {
    // Handlers that settle in this turn of the event loop join the first batch.
    await new Promise((resolve) => setImmediate(resolve));
    while (this.#pending.length > 0) {
      const batch = this.#pending.splice(0, MAX_BATCH);
      await this.#write(batch);
    }
  }

  async #write(batch: Result<T>[]): Promise<void> {
    const successes = batch.filter((r) => r.ok);
    const failures = batch.filter((r): r is Extract<Result<T>, { ok: false }> => !r.ok);
    let attempt = 0;
    let permanentErrors = 0;
    for (;;) {
      try {
        const [completed, outcomes] = await Promise.all([
          successes.length > 0 ? this.#deps.complete(successes.map((r) => r.job)) : new Set<string>(),
          failures.length > 0 ? this.#deps.fail(failures) : [],
        ]);
        const byKey = new Map(outcomes.map((o) => [leaseKey(o), o]));
        for (const r of successes) {
          if (completed.has(leaseKey(r.job))) this.#deps.onWritten(r, undefined);
          else this.#deps.onStale(r.job);
        }
        for (const r of failures) {
          const outcome = byKey.get(leaseKey(r.job));
          if (outcome) this.#deps.onWritten(r, outcome);
          else this.#deps.onStale(r.job);
        }
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

  /** Resolves when every pushed result is written, or after `timeoutMs` (then stops retrying). */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.#flushing) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        this.#giveUp = true;
        return;
      }
      await Promise.race([this.#flushing, sleep(remaining)]);
    }
  }
}
