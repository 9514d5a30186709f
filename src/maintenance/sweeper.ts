/**
 * The sweeper: reclaims running (and buffered) jobs whose lease outlived its
 * visibility timeout, back to `queued`, or to `dead` when out of attempts so
 * that a job that kills its worker every time does not loop forever; and ends
 * queued jobs past their start deadline as `cancelled` (expired). A service
 * of the maintenance loop: at most one sweep runs at a time across all workers.
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import { type MaintenanceService, withMaintenanceLock } from './maintainer.js';

/** Jobs reclaimed per sweep; a larger backlog is taken by the next sweeps. */
export const SWEEP_BATCH_LIMIT = 1000;

/** What one sweep did; `locked` is false when another process was sweeping. */
export interface SweepResult {
  locked: boolean;
  requeued: number;
  dead: number;
}

/**
 * Runs one sweep now, under the sweeper's lock.
 *
 * @param defaultVisibilityTimeoutMs - applies to running rows without their own
 *   `visibility_timeout_ms` (set running by plain SQL).
 * @throws {DatabaseError} when the database cannot be reached.
 */
export async function sweep(
  pool: pg.Pool,
  queries: JobQueries,
  defaultVisibilityTimeoutMs: number,
): Promise<SweepResult> {
  const outcome = await withMaintenanceLock(pool, queries.names.schema, 'sweep', async (client) => {
    await queries.sweep.expire(client, SWEEP_BATCH_LIMIT);
    return queries.sweep.sweep(client, defaultVisibilityTimeoutMs, SWEEP_BATCH_LIMIT);
  });
  return outcome.locked ? { locked: true, ...outcome.result } : { locked: false, requeued: 0, dead: 0 };
}

/** The sweeper as a maintenance service; `onSwept` hears of every sweep that reclaimed jobs. */
export function sweeperService(
  queries: JobQueries,
  options: { intervalMs: number; defaultVisibilityTimeoutMs: number },
  onSwept: (result: { requeued: number; dead: number }) => void,
): MaintenanceService {
  return {
    name: 'sweep',
    intervalMs: options.intervalMs,
    async run(client) {
      await queries.sweep.expire(client, SWEEP_BATCH_LIMIT);
      const result = await queries.sweep.sweep(client, options.defaultVisibilityTimeoutMs, SWEEP_BATCH_LIMIT);
      if (result.requeued + result.dead > 0) onSwept(result);
    },
  };
}
