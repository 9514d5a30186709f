/**
 * Deadlocks a producer gives way to. PostgreSQL breaks a deadlock by failing
 * one of its statements (SQLSTATE 40P01); when that is a producer's, undoing
 * what it did lets the other side go on, and after a pause the producer tries
 * again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DatabaseError } from '../errors.js';

/** Deadlocks a producer tries again after before it gives up (each costs the server's `deadlock_timeout`). */
export const MAX_DEADLOCK_RETRIES = 5;

/** Least pause, in milliseconds, before a producer tries again after a deadlock; jittered, and longer each time. */
const DEADLOCK_PAUSE_MS = 20;

/** Whether `error` is the database failing a statement to break a deadlock. */
export function isDeadlock(error: unknown): boolean {
  return error instanceof DatabaseError && error.sqlState === '40P01';
}

/** Waits before the `n`th try after a deadlock (n from 1): jittered, longer each time. */
export function deadlockPause(n: number): Promise<void> {
  return sleep(DEADLOCK_PAUSE_MS * (1 + Math.random()) * n);
}

/**
 * Runs `attempt`, and again after a pause while the database fails it to
 * break a deadlock, at most {@link MAX_DEADLOCK_RETRIES} times; `undo` runs
 * after each such failure, before the pause (to let go of what it held).
 *
 * @throws {DatabaseError} 40P01 after the last retry, or whatever `attempt` or `undo` throws.
 */
export async function retryingDeadlocks<T>(
  attempt: () => Promise<T>,
  undo?: () => Promise<unknown>,
): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (error) {
      if (!isDeadlock(error) || n > MAX_DEADLOCK_RETRIES) throw error;
      await undo?.();
      await deadlockPause(n);
    }
  }
}
