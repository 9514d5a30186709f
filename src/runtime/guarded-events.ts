/**
 * Events of background loops (worker, relay, broker-side workers) must never
 * throw into the loop that emits them: a listener that throws becomes an
 * `error` event of source `listener`, and an `error` nobody hears, or whose
 * listener throws, goes to the console.
 */
import type { EventEmitter } from 'node:events';
import { SkiplockError } from '../errors.js';

/** A thrown value's message, without ever throwing itself. */
export function describeListenerError(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return 'a value that cannot be described';
  }
}

/**
 * Emits `event` with `args` on `emitter`; a listener that throws is handed to
 * `report` as a `SkiplockError` with code `LISTENER`.
 */
export function emitGuarded(
  emitter: EventEmitter,
  event: string,
  args: readonly unknown[],
  report: (error: SkiplockError) => void,
): void {
  try {
    emitter.emit(event, ...args);
  } catch (error) {
    report(
      new SkiplockError('LISTENER', `a '${event}' listener threw: ${describeListenerError(error)}`, {
        cause: error,
      }),
    );
  }
}

/**
 * Emits `error` with `(error, source)` on `emitter`; when nobody listens, or
 * the listener throws, writes it to the console as `[skiplock] <label>: …`.
 */
export function emitError(emitter: EventEmitter, error: SkiplockError, source: string, label: string): void {
  if (emitter.listenerCount('error') > 0) {
    try {
      emitter.emit('error', error, source);
      return;
    } catch (listenerError) {
      console.error(
        `[skiplock] ${label}: an 'error' listener threw: ${describeListenerError(listenerError)}`,
      );
    }
  }
  console.error(`[skiplock] ${label}: ${source} error: ${error.message}`);
}
