/**
 * The sweeper (SPEC §6): reclaims running jobs whose lease outlived its
 * visibility timeout, back to `queued`, or to `dead` when out of attempts so
 * that a job that kills its worker every time does not loop forever.
 *
 * One sweep at a time across all workers: each sweep runs in a transaction that
 * first tries a transaction-scoped advisory lock and skips when another process
 * holds it. The lock ends with the transaction, and the transaction cannot idle
 * (idle_in_transaction_session_timeout), so a frozen or dead process never stops
 * the others from sweeping.
 */
import type pg from 'pg';
import { withTransaction } from '../db/executor.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { advisoryLockKey } from '../db/sql.js';

/** Jobs reclaimed per sweep; a larger backlog is taken by the next sweeps. */
export const SWEEP_BATCH_LIMIT = 1000;

/** What one sweep did; `locked` is false when another process was sweeping. */
export interface SweepResult {
  locked: boolean;
  requeued: number;
  dead: number;
}

/**
 * Runs one sweep.
 *
 * @param defaultVisibilityTimeoutMs - applies to running rows without their own
 *   `visibility_timeout_ms` (set running by plain SQL).
 * @throws {DatabaseError} when the database cannot be reached.
 */
export function sweep(
  pool: pg.Pool,
  queries: JobQueries,
  schema: string,
  defaultVisibilityTimeoutMs: number,
): Promise<SweepResult> {
  return withTransaction(
    pool,
    async (client) => {
      const { rows } = await client.query<{ locked: boolean }>(
        'SELECT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended($1, 0)) AS locked',
        [advisoryLockKey('sweep', schema)],
      );
      if (!rows[0]?.locked) return { locked: false, requeued: 0, dead: 0 };
      return {
        locked: true,
        ...(await queries.sweep(client, defaultVisibilityTimeoutMs, SWEEP_BATCH_LIMIT)),
      };
    },
    10_000,
  );
}
