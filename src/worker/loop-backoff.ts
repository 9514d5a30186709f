/**
 * Pause before a background loop retries after a database error (connection
 * lost, server restarting): 100 ms doubling to 5 s, with jitter so that many
 * workers do not reconnect in lockstep.
 */
export function loopBackoffMs(consecutiveFailures: number): number {
  const base = Math.min(100 * 2 ** Math.min(consecutiveFailures, 6), 5000);
  return base * (0.5 + Math.random() * 0.5);
}
