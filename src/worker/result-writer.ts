/**
 * How one worker's results reach the database and its listeners: the
 * completer wired to the finish statement (success by policy, retry, failure,
 * dead letter, snooze, and the cancel of a job whose cancel was requested)
 * and to the worker's events.
 */
import type pg from 'pg';
import type { SuccessPolicy } from '../db/queries/finish.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { Clock } from '../runtime/clock.js';
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
  /** The clock the completer's retries and its stop deadline read. */
  clock: Clock;
}

/** The worker's completer. */
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
