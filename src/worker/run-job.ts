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
 * fails with {@link JobTimeoutError} and its signal is aborted; a handler that
 * ignores its signal keeps running, but the attempt is over. The same holds
 * when the signal is aborted with a {@link CancelledError}.
 */
export async function runJob(
  handler: Handler<string, unknown> | undefined,
  job: Job,
  controller: AbortController,
  timeoutMs: number | undefined,
): Promise<RunOutcome> {
  if (!handler) return failure(new UnknownKindError(job.kind));
  let timer: NodeJS.Timeout | undefined;
  try {
    const result = handler(job, { signal: controller.signal });
    if (isThenable(result)) {
      // A handler that ignores its signal may settle later; nobody listens then.
      Promise.resolve(result).catch(() => {});
      const racers: PromiseLike<unknown>[] = [result, whenCancelled(controller.signal)];
      if (timeoutMs !== undefined) {
        racers.push(
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => {
              const error = new JobTimeoutError(timeoutMs);
              controller.abort(error);
              reject(error);
            }, timeoutMs);
          }),
        );
      }
      await Promise.race(racers);
    }
    return SUCCESS;
  } catch (error) {
    return failure(error);
  } finally {
    clearTimeout(timer);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** Rejects with the reason once `signal` is aborted by a cancel; never settles otherwise. */
function whenCancelled(signal: AbortSignal): Promise<never> {
  return new Promise<never>((_, reject) => {
    signal.addEventListener(
      'abort',
      () => {
        if (signal.reason instanceof CancelledError) reject(signal.reason);
      },
      { once: true },
    );
  });
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
