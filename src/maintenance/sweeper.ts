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
  /** Running jobs whose lease expired, back to `queued`. */
  requeued: number;
  /** Running jobs whose lease expired on their last attempt, to `dead`. */
  dead: number;
  /** Queued jobs past their start deadline, ended `cancelled` (expired). */
  expired: number;
}

/** What a sweep did to jobs: the counts of {@link SweepResult}. */
export type SweptJobs = Omit<SweepResult, 'locked'>;

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
  const outcome = await withMaintenanceLock(pool, queries.names.schema, 'sweep', (client) =>
    sweepJobs(client, queries, defaultVisibilityTimeoutMs),
  );
  return outcome.locked
    ? { locked: true, ...outcome.result }
    : { locked: false, requeued: 0, dead: 0, expired: 0 };
}

/** Expires, then reclaims, one batch each, on the sweeper's locked connection. */
async function sweepJobs(
  client: pg.PoolClient,
  queries: JobQueries,
  defaultVisibilityTimeoutMs: number,
): Promise<SweptJobs> {
  const expired = await queries.sweep.expire(client, SWEEP_BATCH_LIMIT);
  const reclaimed = await queries.sweep.sweep(client, defaultVisibilityTimeoutMs, SWEEP_BATCH_LIMIT);
  return { ...reclaimed, expired };
}

/** The sweeper as a maintenance service; `onSwept` hears of every sweep that reclaimed or expired jobs. */
export function sweeperService(
  queries: JobQueries,
  options: { intervalMs: number; defaultVisibilityTimeoutMs: number },
  onSwept: (result: SweptJobs) => void,
): MaintenanceService {
  return {
    name: 'sweep',
    intervalMs: options.intervalMs,
    async run(client) {
      const result = await sweepJobs(client, queries, options.defaultVisibilityTimeoutMs);
      if (result.requeued + result.dead + result.expired > 0) onSwept(result);
    },
  };
}
