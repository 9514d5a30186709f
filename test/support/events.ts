/**
 * Waiting on worker events in tests: register first, then act, then await.
 * Every test reaches the worker's events through this module, so a renamed
 * event is a change here. The life-cycle events are about to be namespaced
 * (`worker:listen`…): use the constants below, not their strings.
 */
import type { Worker, WorkerEvents } from '../../src/index.js';

/** The LISTEN connection is (re)established. */
export const LISTEN = 'worker:listen' satisfies keyof WorkerEvents;
/** A sweep reclaimed jobs. */
export const SWEEP = 'worker:sweep' satisfies keyof WorkerEvents;
/** The worker stopped. */
export const STOP = 'worker:stop' satisfies keyof WorkerEvents;
/** A warning for the operator (a deaf LISTEN connection, for one). */
export const WARNING = 'worker:warning' satisfies keyof WorkerEvents;
/** A claim returned jobs. */
export const CLAIM = 'worker:claim' satisfies keyof WorkerEvents;

type EventName = keyof WorkerEvents;

/** How long a test waits for one event by default: well below the suites' test timeouts. */
export const EVENT_TIMEOUT_MS = 15_000;

/**
 * The next `name` event of `worker`, as its argument list. Register it BEFORE
 * the action that causes it: a commit can reach a worker before it reaches the
 * committing client. Unlike events.once, an `error` event does not reject it;
 * it rejects when the worker stops first or after `timeoutMs`, naming the event.
 * A wait the test never awaits (it failed earlier) is not an unhandled rejection.
 */
export function nextEvent<Name extends EventName>(
  worker: Worker,
  name: Name,
  timeoutMs = EVENT_TIMEOUT_MS,
): Promise<WorkerEvents[Name]> {
  const waiting = new Promise<WorkerEvents[Name]>((resolve, reject) => {
    const settle = (outcome: () => void) => {
      clearTimeout(timer);
      worker.off(name, onEvent as never);
      if (name !== STOP) worker.off(STOP, onStop);
      outcome();
    };
    const onEvent = (...args: WorkerEvents[Name]) => settle(() => resolve(args));
    const onStop = () => settle(() => reject(new Error(`the worker stopped before a ${name} event`)));
    const timer = setTimeout(
      () => settle(() => reject(new Error(`no ${name} event within ${timeoutMs} ms`))),
      timeoutMs,
    );
    worker.on(name, onEvent as never);
    if (name !== STOP) worker.on(STOP, onStop);
  });
  waiting.catch(() => {});
  return waiting;
}

/**
 * Runs `act` with the wait for the next `name` event of `worker` registered
 * first (see {@link nextEvent}); resolves with what `act` resolved with and
 * the event's argument list. For the usual "enqueue, then see it end".
 */
export async function eventOf<Name extends EventName, T>(
  worker: Worker,
  name: Name,
  act: () => Promise<T>,
  timeoutMs = EVENT_TIMEOUT_MS,
): Promise<[T, WorkerEvents[Name]]> {
  const event = nextEvent(worker, name, timeoutMs);
  const acted = await act();
  return [acted, await event];
}

/** Records the argument lists of every `name` event of `worker` from now on. */
export function record<Name extends EventName>(worker: Worker, name: Name): WorkerEvents[Name][] {
  const seen: WorkerEvents[Name][] = [];
  worker.on(name, ((...args: WorkerEvents[Name]) => seen.push(args)) as never);
  return seen;
}
