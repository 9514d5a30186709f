/**
 * How the long-running commands (`worker`, `relay`) stop: the first SIGTERM or
 * SIGINT starts a graceful stop; the same signal often arrives twice at once
 * (to the process and to its group), so only one a second or more later — a
 * person insisting — exits at once with status 1.
 */

/**
 * Calls `stop` on the first SIGTERM/SIGINT and resolves (or rejects) as it
 * does; on a later one (a second or more after), calls `forced` and exits 1.
 */
export function stopOnSignals(
  stop: (signal: NodeJS.Signals) => Promise<void>,
  forced: (signal: NodeJS.Signals) => void,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let stoppingAt: number | undefined;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stoppingAt !== undefined && Date.now() - stoppingAt < 1000) return;
      if (stoppingAt !== undefined) {
        forced(signal);
        process.exit(1);
      }
      stoppingAt = Date.now();
      stop(signal).then(resolve, reject);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
