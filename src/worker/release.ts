/**
 * Giving jobs back: held jobs (buffered, or running on stop) return to `queued`
 * without charging the attempt, or end `cancelled` when their cancel was
 * requested. Retried with backoff until a deadline, which also bounds a
 * statement that does not answer (a half-open connection): past it the jobs
 * are abandoned, and the sweeper gives them back after the visibility timeout.
 */
import { translateError } from '../db/executor.js';
import { leaseKey } from '../db/queries/job-row.js';
import type { SkiplockError } from '../errors.js';
import { type Clock, sleep, systemClock } from '../runtime/clock.js';
import type { EventReporter } from './events.js';
import type { Execution } from './executions.js';
import { loopBackoffMs } from './loop-backoff.js';

/** What releasing needs. */
export interface ReleaseRequest {
  jobs: Execution[];
  /** Sends the release statement; returns the lease keys it released, with what each job became. */
  release(): Promise<Map<string, 'queued' | 'cancelled'>>;
  /** Give up after this many milliseconds, even while a statement is in flight. */
  deadlineMs: number;
  /** `status`: `cancelled` for a job whose cancel was requested, else `queued`. */
  onReleased(e: Execution, status: 'queued' | 'cancelled'): void;
  onError(error: SkiplockError): void;
  /** Times the deadline and the pauses between tries. @default the process's clock */
  clock?: Clock;
}

/** Releases the jobs, retrying until the deadline. Never rejects. */
export async function releaseJobs(request: ReleaseRequest): Promise<void> {
  const clock = request.clock ?? systemClock;
  const deadline = clock.monotonic() + request.deadlineMs;
  for (let attempt = 0; ; attempt++) {
    const remaining = deadline - clock.monotonic();
    if (remaining <= 0) return;
    try {
      const released = await withinDeadline(request.release(), remaining, clock);
      // Past the deadline the statement is abandoned: whatever it did, the jobs are not reported.
      if (released === undefined) return;
      for (const e of request.jobs) {
        const status = released.get(leaseKey(e));
        if (status) request.onReleased(e, status);
      }
      return;
    } catch (error) {
      request.onError(translateError(error));
      const pause = loopBackoffMs(attempt);
      if (clock.monotonic() + pause >= deadline) return;
      // Kept alive: the jobs are given back before the process may end.
      await sleep(clock, pause, undefined, { keepAlive: true });
    }
  }
}

/** What `promise` resolves to within `ms`, or undefined after it (the promise is left to settle unheard). */
async function withinDeadline<T>(promise: Promise<T>, ms: number, clock: Clock): Promise<T | undefined> {
  let timer: unknown;
  promise.catch(() => {});
  try {
    return await Promise.race([
      promise,
      new Promise<undefined>((resolve) => {
        timer = clock.setTimeout(() => resolve(undefined), ms, { keepAlive: true });
      }),
    ]);
  } finally {
    clock.clearTimeout(timer);
  }
}

/** A lease to give back, and whether its handler started (a started job whose cancel was requested keeps its attempt). */
export interface ReleasedLease {
  id: string;
  attempts: number;
  leaseSeq: string;
  started: boolean;
}

/**
 * Gives a worker's held executions back (those still buffered or running;
 * others ended meanwhile) and reports each `job:released`, or `job:cancelled`
 * when its cancel was requested. Never rejects.
 */
export async function releaseExecutions(
  executions: Execution[],
  deadlineMs: number,
  deps: {
    release(leases: ReleasedLease[]): Promise<Map<string, 'queued' | 'cancelled'>>;
    events: EventReporter;
    /** Times the deadline and the pauses between tries. @default the process's clock */
    clock?: Clock;
  },
): Promise<void> {
  const held = executions.filter((e) => e.state === 'buffered' || e.state === 'running');
  const leases = held.map((e) => ({
    id: e.id,
    attempts: e.attempts,
    leaseSeq: e.leaseSeq,
    started: e.state === 'running',
  }));
  for (const e of held) e.state = 'released';
  if (held.length === 0) return;
  await releaseJobs({
    release: () => deps.release(leases),
    jobs: held,
    deadlineMs,
    onReleased: (e, status) =>
      deps.events.emit(status === 'cancelled' ? 'job:cancelled' : 'job:released', e.job),
    onError: (error) => deps.events.error(error, 'release'),
    ...(deps.clock && { clock: deps.clock }),
  });
}
