/**
 * Graceful shutdown on SIGTERM/SIGINT for every worker of the process that asked
 * for it (`handleSignals`). One listener per signal serves them all: on the
 * signal, every registered worker stops gracefully, and only when the last one
 * has stopped is the signal raised again — if nobody else listens for it — so
 * the process ends as it would have without skiplock.
 */

/** What the coordinator needs of a worker. */
export interface Stoppable {
  stop(): Promise<void>;
}

const SIGNALS = ['SIGTERM', 'SIGINT'] as const;
const workers = new Set<Stoppable>();
let stopping: Promise<void> | undefined;

function onSignal(signal: NodeJS.Signals): void {
  stopping ??= Promise.allSettled([...workers].map((w) => w.stop())).then(() => {
    for (const s of SIGNALS) process.off(s, onSignal);
    stopping = undefined;
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}

/** Stops `worker` gracefully on SIGTERM/SIGINT (with the process's other such workers). */
export function stopOnSignals(worker: Stoppable): void {
  if (workers.size === 0) for (const s of SIGNALS) process.on(s, onSignal);
  workers.add(worker);
}

/** Forgets `worker`; the listeners go when no worker is left and no shutdown is under way. */
export function forgetOnSignals(worker: Stoppable): void {
  workers.delete(worker);
  if (workers.size === 0 && !stopping) for (const s of SIGNALS) process.off(s, onSignal);
}
