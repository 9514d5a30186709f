/**
 * Defaults that several entries share, defined once. Pure: no I/O.
 */

/** Queue of a job enqueued without one, and of a worker given none. */
export const DEFAULT_QUEUE = 'default';

/** Attempts before the dead letter when `maxAttempts` is not given (the table's default too). */
export const DEFAULT_MAX_ATTEMPTS = 20;

/** Deadline of opening a connection of a pool skiplock makes, in milliseconds. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** Longest delay accepted (enqueue's `delayMs`, a snooze), in milliseconds: 10,000 years. */
export const MAX_DELAY_MS = 315_360_000_000_000;

/** Age of a lease after which the sweeper reclaims its job: 5 minutes. */
export const DEFAULT_VISIBILITY_TIMEOUT_MS = 300_000;

/** A job id as the API takes it: the bigint primary key as a positive decimal string. */
export const JOB_ID_PATTERN = /^[1-9][0-9]{0,18}$/;

/** Largest job id (PostgreSQL's bigint). */
export const MAX_JOB_ID = 9_223_372_036_854_775_807n;

/** Whether `id` is a job id within bigint range. */
export function isJobId(id: unknown): id is string {
  return typeof id === 'string' && JOB_ID_PATTERN.test(id) && BigInt(id) <= MAX_JOB_ID;
}
