/**
 * How one worker's results reach the database and its listeners: the
 * completer wired to the result statements (success by policy, failure,
 * snooze, and the cancel of a job whose cancel was requested) and to the
 * worker's events.
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import type { FailedJob, FailureOutcome, SuccessPolicy } from '../db/queries/results.js';
import { Completer } from './completer.js';
import type { EventReporter } from './events.js';
import type { Execution } from './executions.js';

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
}

/** The worker's completer. */
export function resultWriter(deps: ResultWriterDeps): Completer<Execution> {
  const { queries, pool, workerId, events } = deps;
  return new Completer<Execution>({
    complete: (jobs) => queries.results.complete(pool, jobs, workerId, deps.onSuccess),
    fail: (failures) => failOrSnooze(queries, pool, failures, workerId),
    cancel: (jobs) => queries.cancel.finish(pool, jobs, workerId),
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
  });
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

/**
 * Writes failed attempts, fenced by their leases: failures with the failure
 * statement (retry with backoff, dead letter, failed) and snoozes with the
 * snooze statement (back to `queued` after the delay, attempt not charged),
 * side by side. The worker's completer and `drain()` in `skiplock/testing`
 * both write through it, so a test runs a job's outcome as a worker does.
 */
export async function failOrSnooze(
  queries: JobQueries,
  pool: Pick<pg.Pool, 'query'>,
  failures: FailedJob[],
  workerId: string,
): Promise<FailureOutcome[]> {
  const snoozes: (FailedJob & { snoozeDelayMs: number })[] = [];
  const others: FailedJob[] = [];
  for (const f of failures) {
    if (f.snoozeDelayMs === undefined) others.push(f);
    else snoozes.push(f as FailedJob & { snoozeDelayMs: number });
  }
  const [failed, snoozed] = await Promise.all([
    others.length > 0 ? queries.results.fail(pool, others, workerId) : [],
    snoozes.length > 0
      ? queries.snooze.snooze(
          pool,
          snoozes.map((f) => ({
            id: f.id,
            attempts: f.attempts,
            leaseSeq: f.leaseSeq,
            delayMs: f.snoozeDelayMs,
          })),
          workerId,
        )
      : [],
  ]);
  return [...failed, ...snoozed.map((s) => ({ ...s, status: 'queued' as const, retryDelayMs: s.delayMs }))];
}
