/**
 * The retry delay rule: `2^attempts` seconds,
 * capped at one hour, times a random factor in [0.5, 1.0).
 *
 * The database computes the real delay on its own clock (see `fail` in
 * `db/queries/results.ts`); this pure mirror documents the rule and is what the
 * property tests hold the SQL to.
 */

/** Cap of the backoff delay before jitter: one hour, in milliseconds. */
export const BACKOFF_CAP_MS = 3_600_000;

/**
 * Exponent ceiling: `2^12` s already exceeds the cap, and clamping keeps
 * `power(2, attempts)` finite for any attempts count (SQL mirrors this).
 */
export const BACKOFF_MAX_EXPONENT = 12;

/**
 * Delay before the next attempt, in milliseconds.
 *
 * @param attempts - claims so far, including the failed one (≥ 0).
 * @param random - a number in [0, 1); `Math.random()` by default.
 * @returns `min(2^attempts s, 1 h) × (0.5 + random × 0.5)`: finite, ≥ 500 ms, < 1 h.
 */
export function backoffDelayMs(attempts: number, random: number = Math.random()): number {
  const exponent = Math.min(Math.max(attempts, 0), BACKOFF_MAX_EXPONENT);
  const baseMs = Math.min(1000 * 2 ** exponent, BACKOFF_CAP_MS);
  return baseMs * (0.5 + random * 0.5);
}
