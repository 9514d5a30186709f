/**
 * The executor of one attempt: runs the handler (through the worker's
 * middleware, composed once per kind) to an outcome — honouring the job
 * timeout and a cancel, handing the handler its AbortSignal, and classifying
 * what it threw (permanent, snooze or retryable). Never rejects, whatever the
 * handler does. The worker and `drain()` in `skiplock/testing` both run
 * attempts through it. Also the attempt's control (its abort side, made
 * when the handler starts) and the handler context built on it.
 */

import type { ParentJob } from '../db/queries/dependencies.js';
import {
  CancelledError,
  isPermanentError,
  JobTimeoutError,
  SkiplockError,
  snoozeDelayMs,
  UnknownKindError,
} from '../errors.js';
import { describeFailure } from '../job/failure.js';
import type { Job } from '../job/job.js';
import { type ProgressSink, ProgressWriter } from '../workflow/progress-writer.js';
import {
  type BatchContext,
  batchOutcomes,
  type Handler,
  type HandlerContext,
  type ResolvedBatch,
  type ResolvedHandler,
} from './handler-definition.js';

/** How one attempt ended, before it is written. */
export type RunOutcome =
  | {
      ok: true;
      /** What the handler returned (its promise resolved with); absent when undefined. */
      value?: unknown;
    }
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

/** {@link runJob}'s arguments after the handler, for runners that wrap it. */
export type AttemptArgs = Parameters<typeof runJob> extends [unknown, ...infer Rest] ? Rest : never;

/**
 * Runs `handler` on `job`. With `timeoutMs`, an attempt still running then
 * fails with {@link JobTimeoutError} and is aborted; a handler that ignores its
 * signal keeps running, but the attempt is over. The same holds when the
 * attempt is aborted with a {@link CancelledError}. One promise per attempt,
 * no listener: a handler that never reads its signal costs no AbortSignal.
 * With `sink`, the handler's `progress` and `log` write `attempt`'s progress there.
 */
export function runJob(
  handler: Handler<string, unknown> | undefined,
  job: Job,
  control: AttemptControl,
  timeoutMs: number | undefined,
  sink?: ProgressSink,
  attempt?: unknown,
): Promise<RunOutcome> {
  if (!handler) return Promise.resolve(failure(new UnknownKindError(job.kind)));
  let result: unknown;
  try {
    result = handler(job, attemptContext(control, job.id, sink, attempt));
  } catch (error) {
    return afterOutput(control, failure(error));
  }
  if (!isThenable(result)) return afterOutput(control, success(result));
  const pending = result;
  return new Promise<RunOutcome>((resolve) => {
    const attempt = new SettlingAttempt(control, resolve);
    try {
      pending.then(
        (value) => attempt.settle(success(value)),
        (error: unknown) => attempt.settle(failure(error)),
      );
    } catch (error) {
      // A thenable whose then() throws: the attempt failed, it did not break the worker.
      attempt.settle(failure(error));
    }
    if (attempt.settled) return;
    if (control.aborted) {
      if (control.reason instanceof CancelledError) attempt.settle(failure(control.reason));
      return;
    }
    control.onAbort = (reason) => {
      if (reason instanceof CancelledError) attempt.settle(failure(reason));
    };
    if (timeoutMs !== undefined) attempt.timeOutAfter(timeoutMs);
  });
}

/**
 * An attempt whose handler returned a promise: the first of its settling, its
 * timeout and its cancel decides; a handler that settles later is not heard.
 * A class rather than closures: a transpiler that keeps function names (tsx,
 * esbuild) renames each named closure on every attempt, at a cost.
 */
class SettlingAttempt {
  settled = false;
  #timer: NodeJS.Timeout | undefined;
  readonly #control: AttemptControl;
  readonly #resolve: (outcome: RunOutcome) => void;

  constructor(control: AttemptControl, resolve: (outcome: RunOutcome) => void) {
    this.#control = control;
    this.#resolve = resolve;
  }

  settle(outcome: RunOutcome): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.#timer);
    this.#control.onAbort = undefined;
    const output = this.#control.output;
    if (output?.pending) void output.flush().then(() => this.#resolve(outcome));
    else this.#resolve(outcome);
  }

  /** Fails the attempt with {@link JobTimeoutError} (and aborts it) after `timeoutMs`, unless settled. */
  timeOutAfter(timeoutMs: number): void {
    this.#timer = setTimeout(() => {
      if (this.settled) return;
      const error = new JobTimeoutError(timeoutMs);
      this.#control.abort(error);
      this.settle(failure(error));
    }, timeoutMs);
  }
}

/**
 * `outcome`, once the progress and log lines the handler reported without
 * awaiting them are written (at once when there are none): the attempt's end
 * changes its lease, and a later write would be fenced off.
 */
function afterOutput(control: AttemptControl, outcome: RunOutcome): Promise<RunOutcome> {
  const output = control.output;
  return output?.pending ? output.flush().then(() => outcome) : Promise.resolve(outcome);
}

/** The success outcome of a handler that returned `value` (shared when it returned nothing). */
function success(value: unknown): RunOutcome {
  return value === undefined ? SUCCESS : { ok: true, value };
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

/**
 * A hook around every attempt of a worker's handlers — logging, metrics,
 * context propagation, a guard that refuses some jobs. It gets the job, the
 * handler's context (with `client` for a transactional handler) and `next`,
 * which runs the rest of the chain and then the handler and resolves with the
 * handler's return value (or rejects with what it threw). What the middleware
 * itself returns or throws is the attempt's outcome: a throw fails the attempt
 * as a handler's would (`PermanentError` and `SnoozeError` included), and not
 * calling `next` ends the attempt without running the handler (`next` runs the
 * rest once: a second call rejects). The job's timeout, a cancel and the
 * signal cover the whole chain.
 *
 * @example
 * const timing: Middleware = async (job, _context, next) => {
 *   const startedAt = performance.now();
 *   try {
 *     return await next();
 *   } finally {
 *     log.info({ kind: job.kind, id: job.id, ms: performance.now() - startedAt });
 *   }
 * };
 * skiplock.worker({ handlers, middleware: [timing] });
 */
export type Middleware = (
  job: Job<string, unknown>,
  context: HandlerContext,
  next: () => Promise<unknown>,
) => unknown;

/**
 * The handlers with `middleware` around each (the first is the outermost),
 * composed once here so an attempt pays only for the middleware it has: none
 * when the list is empty.
 */
export function withMiddleware(
  handlers: Map<string, ResolvedHandler>,
  middleware: readonly Middleware[],
): Map<string, ResolvedHandler> {
  if (middleware.length === 0) return handlers;
  const wrapped = new Map<string, ResolvedHandler>();
  for (const [kind, handler] of handlers) {
    const handle = handler.handle as (job: Job<string, unknown>, context: HandlerContext) => unknown;
    let chained = handle;
    for (let i = middleware.length - 1; i >= 0; i--) {
      const outer = middleware[i]!;
      const inner = chained;
      chained = (job, context) => {
        let called = false;
        return outer(job, context, () => {
          if (called) return Promise.reject(new Error('next() was called twice in one attempt'));
          called = true;
          const ran = Promise.resolve().then(() => inner(job, context));
          // A middleware that does not wait for next() decides the outcome itself;
          // the handler's own rejection then must not crash the process.
          ran.catch(() => {});
          return ran;
        });
      };
    }
    const batch =
      !handler.transactional && handler.batch ? batchWithMiddleware(handler.batch, middleware) : undefined;
    wrapped.set(
      kind,
      (batch ? { ...handler, handle: chained, batch } : { ...handler, handle: chained }) as ResolvedHandler,
    );
  }
  return wrapped;
}

// --- batch handlers ---

/**
 * Runs a batch handler on `jobs` as one attempt (timeout, signal and
 * middleware as {@link runJob}'s, over the whole batch) and returns one outcome
 * per job, in their order: each its own when the handler returned an array of
 * one outcome per job, else (a throw, a timeout, a wrong result) the same
 * failure for every job. The context's `parents()` rejects with a
 * {@link SkiplockError} (code `USAGE`): the context is the batch's, not one
 * job's. Never rejects.
 */
export async function runBatch(
  batch: ResolvedBatch,
  jobs: Job[],
  control: AttemptControl,
  timeoutMs: number | undefined,
): Promise<RunOutcome[]> {
  control.parentsOf = batchParents;
  let returned: unknown;
  const call: Handler<string, unknown> = (_job, context) => {
    // A copy: what the handler does to its array must not move outcomes onto other jobs.
    const result = batch.handleBatch(jobs.slice(), context);
    if (!isThenable(result)) {
      returned = result;
      return undefined;
    }
    return Promise.resolve(result).then((value) => {
      returned = value;
    });
  };
  const outcome = await runJob(call, jobs[0]!, control, timeoutMs);
  if (outcome.ok) {
    try {
      // A value is the job's result, as a single handler's return value is. Array.from
      // visits the holes of a sparse array (`new Array(n)`, only failures filled in) as undefined.
      return Array.from(batchOutcomes(returned, jobs.length), (o) =>
        o instanceof Error ? failure(o) : o === undefined ? SUCCESS : { ok: true, value: o },
      );
    } catch (error) {
      return jobs.map(() => failure(error));
    }
  }
  return jobs.map(() => outcome);
}

/** `parents()` in a batch handler's context: a {@link SkiplockError} (code `USAGE`) saying why. */
export function batchParents(): Promise<ParentJob[]> {
  return Promise.reject(
    new SkiplockError(
      'USAGE',
      "parents() is not available in a batch handler (its context is the whole batch's, not one job's); give a kind whose jobs read their parents a single handler (handle)",
    ),
  );
}

/** A batch handler with `middleware` around each call; it is given the batch's first job. */
function batchWithMiddleware(batch: ResolvedBatch, middleware: readonly Middleware[]): ResolvedBatch {
  // The context runBatch passes is the first job's full handler context (a BatchContext to the handler).
  const handleBatch = (jobs: Job[], batchContext: BatchContext): unknown => {
    const context = batchContext as HandlerContext;
    let handlerRan = false;
    let next = () => {
      handlerRan = true;
      return Promise.resolve().then(() => batch.handleBatch(jobs, context));
    };
    for (let i = middleware.length - 1; i >= 0; i--) {
      const outer = middleware[i]!;
      const inner = next;
      next = () => {
        let called = false;
        return Promise.resolve().then(() =>
          outer(jobs[0]!, context, () => {
            if (called) return Promise.reject(new Error('next() was called twice in one attempt'));
            called = true;
            const ran = inner();
            ran.catch(() => {});
            return ran;
          }),
        );
      };
    }
    // A chain that did not call next ends each job as it would end a single job:
    // by the middleware's value (undefined: a success).
    return next().then((value) => (handlerRan ? value : jobs.map(() => value)));
  };
  return { ...batch, handleBatch };
}

// --- end batch handlers ---

/**
 * The abort side of one attempt. Its AbortSignal is made only when the handler
 * (or the transactional runner) asks for it, since most handlers never read
 * it and a signal with its listeners costs more than the rest of a no-op
 * attempt; a timeout, cancel, stop or lost lease aborts the attempt all the
 * same, and a signal made afterwards is already aborted with the same reason.
 */
export class AttemptControl {
  #controller: AbortController | undefined;
  #aborted = false;
  #reason: unknown;
  #onAbort: ((reason: unknown) => void) | undefined;
  /** Reads a job's parents for the handler context's `parents()`; set by whoever runs attempts on a database. */
  parentsOf: ((jobId: string) => Promise<ParentJob[]>) | undefined;
  /** The attempt's progress and log writer, made on the handler's first report. */
  output: ProgressWriter | undefined;

  /** The attempt's signal, made on first use. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  /** Whether the attempt was aborted. */
  get aborted(): boolean {
    return this.#aborted;
  }

  /** Why the attempt was aborted (undefined while it was not). */
  get reason(): unknown {
    return this.#reason;
  }

  /** The one internal listener (the runner's): called once, when the attempt is aborted. */
  set onAbort(listener: ((reason: unknown) => void) | undefined) {
    this.#onAbort = listener;
  }

  /** Aborts the attempt with `reason`; false when it was aborted already (the first reason stands). */
  abort(reason: unknown): boolean {
    if (this.#aborted) return false;
    this.#aborted = true;
    this.#reason = reason;
    this.#controller?.abort(reason);
    const listener = this.#onAbort;
    this.#onAbort = undefined;
    listener?.(reason);
    return true;
  }
}

/**
 * What a handler gets beside its job: the attempt's signal, made when read,
 * its parents, read when asked, and `progress`/`log`, written through `sink`
 * for `attempt` (without a sink they write nothing and resolve false).
 * `signal` and `parents` are own, enumerable properties, so a copy of the
 * context (`{ ...context, logger }`) keeps them.
 */
export function attemptContext(
  control: AttemptControl,
  jobId: string,
  sink?: ProgressSink,
  attempt?: unknown,
): HandlerContext {
  // The writer is made on the first report. Methods rather than arrow functions: they close over
  // this call all the same, and a transpiler that keeps function names (tsx, esbuild) renames each
  // named arrow with Object.defineProperty on every call, which cost more than the rest of a no-op attempt.
  const context = {
    [CONTROL]: control,
    parents() {
      return control.parentsOf
        ? control.parentsOf(jobId)
        : Promise.reject(new Error('parents() reads the jobs table; this worker has no connection to it'));
    },
    progress(value: unknown) {
      if (!sink) return NOT_WRITTEN;
      control.output ??= new ProgressWriter(sink, attempt);
      return control.output.progress(value);
    },
    log(line: string) {
      if (!sink) return NOT_WRITTEN;
      control.output ??= new ProgressWriter(sink, attempt);
      return control.output.log(line);
    },
  };
  // One getter shared by every context: a getter of the object literal's own would be a new
  // function per attempt, and so a new hidden class per attempt, which cost more than the rest.
  return Object.defineProperty(context, 'signal', SIGNAL) as unknown as HandlerContext;
}

/** Where a context keeps its attempt's control, for the shared `signal` getter. */
const CONTROL = Symbol('skiplock.attemptControl');

/** The context's `signal`: own and enumerable, so a copy of the context keeps it; made on first read. */
const SIGNAL: PropertyDescriptor = {
  enumerable: true,
  configurable: true,
  get(this: { [CONTROL]: AttemptControl }): AbortSignal {
    return this[CONTROL].signal;
  },
};

/** What `progress` and `log` resolve with where there is no job row to write to. */
const NOT_WRITTEN = Promise.resolve(false);
