/** Waiting on worker events in tests: register first, then act, then await. */
import type { Worker, WorkerEvents } from '../../src/index.js';

/**
 * The next `name` event of `worker`, as its argument list. Register it BEFORE
 * the action that causes it: a commit can reach a worker before it reaches the
 * committing client. Unlike events.once, an `error` event does not reject it.
 */
export function nextEvent<Name extends keyof WorkerEvents>(
  worker: Worker,
  name: Name,
  timeoutMs = 15_000,
): Promise<WorkerEvents[Name]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no ${String(name)} event within ${timeoutMs} ms`)),
      timeoutMs,
    );
    worker.once(name, ((...args: WorkerEvents[Name]) => {
      clearTimeout(timer);
      resolve(args);
    }) as never);
  });
}
