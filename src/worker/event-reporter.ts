/**
 * How a worker speaks: typed events to its listeners, background errors as
 * `error` events (or on the console when nobody listens), warnings. A listener
 * that throws is reported as an `error` from source `listener` and changes
 * nothing else; an `error` listener that throws falls back to the console.
 */
import type { EventEmitter } from 'node:events';
import { SkiplockError } from '../errors.js';
import type { WorkerErrorSource, WorkerEvents } from './events.js';

/** Emits a worker's events safely. */
export class EventReporter {
  readonly #emitter: EventEmitter<WorkerEvents>;
  readonly #workerId: string;
  /** Connections are being dropped on purpose (past the stop deadline): their errors are expected. */
  quiet = false;

  constructor(emitter: EventEmitter<WorkerEvents>, workerId: string) {
    this.#emitter = emitter;
    this.#workerId = workerId;
  }

  /** Whether anyone listens to `event` (so that a caller can skip building its arguments). */
  heard(event: keyof WorkerEvents): boolean {
    return this.#emitter.listenerCount(event) > 0;
  }

  /** Emits `event`; a listener that throws is reported once. */
  emit<K extends keyof WorkerEvents>(event: K, ...args: WorkerEvents[K]): void {
    try {
      (this.#emitter.emit as (event: K, ...args: WorkerEvents[K]) => boolean)(event, ...args);
    } catch (error) {
      this.error(
        new SkiplockError(
          'LISTENER',
          `a '${String(event)}' listener threw: ${describeListenerError(error)}`,
          {
            cause: error,
          },
        ),
        'listener',
      );
    }
  }

  /** Reports a background error; the loop that hit it retries by itself. */
  error(error: SkiplockError, source: WorkerErrorSource): void {
    if (this.quiet) return;
    if (this.heard('error')) {
      try {
        this.#emitter.emit('error', error, source);
        return;
      } catch (listenerError) {
        console.error(
          `[skiplock] worker ${this.#workerId}: an 'error' listener threw: ${describeListenerError(listenerError)}`,
        );
      }
    }
    console.error(`[skiplock] worker ${this.#workerId}: ${source} error: ${error.message}`);
  }

  /** A warning for the operator: `worker:warning`, or the console when nobody listens. */
  warn(message: string): void {
    if (this.heard('worker:warning')) this.emit('worker:warning', message);
    else console.warn(`[skiplock] worker ${this.#workerId}: warning: ${message}`);
  }
}

function describeListenerError(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return 'a value that cannot be described';
  }
}
