import type { ParentJob } from '../db/queries/dependencies.js';
import { type ProgressSink, ProgressWriter } from '../workflow/progress-writer.js';
import type { HandlerContext } from './handler-definition.js';

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
