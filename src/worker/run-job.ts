/**
 * Runs one handler to an outcome: honours the job timeout, hands the handler
 * its AbortSignal, and classifies what it threw (permanent or retryable). Never
 * rejects, whatever the handler does.
 */
import {
  CancelledError,
  isPermanentError,
  JobTimeoutError,
  snoozeDelayMs,
  UnknownKindError,
} from '../errors.js';
import { describeFailure } from '../job/failure.js';
import type { Job } from '../job/job.js';
import { type AttemptControl, HandlerContext } from './attempt-control.js';
import type { Handler } from './handler-definition.js';

/** How one attempt ended, before it is written. */
export type RunOutcome =
  | { ok: true }
  | {
      ok: false;
      /** The value the handler threw (or the timeout / unknown-kind error). */
      thrown: unknown;
      /** Readable text for `last_error`. */
      error: string;
      /** A PermanentError: the job ends `failed`, without retry. */
      permanent: boolean;
      /** A SnoozeError's delay: the job goes back to `queued` after it, its attempt not charged. */
      snoozeDelayMs: number | undefined;
    };

const SUCCESS: RunOutcome = { ok: true };

/**
 * Runs `handler` on `job`. With `timeoutMs`, an attempt still running then
 * fails with {@link JobTimeoutError} and is aborted; a handler that ignores its
 * signal keeps running, but the attempt is over. The same holds when the
 * attempt is aborted with a {@link CancelledError}. One promise per attempt,
 * no listener: a handler that never reads its signal costs no AbortSignal.
 */
export function runJob(
  handler: Handler<string, unknown> | undefined,
  job: Job,
  control: AttemptControl,
  timeoutMs: number | undefined,
): Promise<RunOutcome> {
  if (!handler) return Promise.resolve(failure(new UnknownKindError(job.kind)));
  let result: unknown;
  try {
    result = handler(job, new HandlerContext(control));
  } catch (error) {
    return Promise.resolve(failure(error));
  }
  if (!isThenable(result)) return Promise.resolve(SUCCESS);
  const pending = result;
  return new Promise<RunOutcome>((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    // The first call decides; a handler that settles after a timeout or cancel is not heard.
    const settle = (outcome: RunOutcome) => {
      clearTimeout(timer);
      control.onAbort = undefined;
      resolve(outcome);
    };
    pending.then(
      () => settle(SUCCESS),
      (error: unknown) => settle(failure(error)),
    );
    if (control.aborted) {
      if (control.reason instanceof CancelledError) settle(failure(control.reason));
      return;
    }
    control.onAbort = (reason) => {
      if (reason instanceof CancelledError) settle(failure(reason));
    };
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => {
        const error = new JobTimeoutError(timeoutMs);
        control.abort(error);
        settle(failure(error));
      }, timeoutMs);
    }
  });
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** The failure outcome of a thrown value. */
export function failure(thrown: unknown): RunOutcome {
  return {
    ok: false,
    thrown,
    error: describeFailure(thrown),
    permanent: isPermanentError(thrown),
    snoozeDelayMs: snoozeDelayMs(thrown),
  };
}

/** The failure outcome of `thrown`, without retry (the job ends `failed`) whatever it is. */
export function permanentFailure(thrown: unknown): RunOutcome {
  return { ...(failure(thrown) as Extract<RunOutcome, { ok: false }>), permanent: true };
}
