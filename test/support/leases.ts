/** Forcing the sweeper's hand in tests, without racing the worker's own timers. */
import type { Skiplock, SweepResult } from '../../src/index.js';
import { waitFor } from './database.js';
import type { JobRow, TestContext } from './fixture.js';

/** Sweeps now; retries while a worker's own sweep holds the lock. */
export async function sweepNow(skiplock: Skiplock): Promise<SweepResult> {
  return waitFor(
    async () => {
      const result = await skiplock.sweep();
      return result.locked ? result : undefined;
    },
    5000,
    'the sweep lock',
  );
}

/**
 * Ages the lease of running job `id` past any visibility timeout and sweeps,
 * again until the lease is gone: a heartbeat may refresh it between the two
 * statements, and a worker's own sweep may be the one that reclaims it.
 * Resolves with the job's row right after.
 */
export async function reclaim(t: TestContext, id: string): Promise<JobRow> {
  const before = await t.row(id);
  if (before?.status !== 'running') throw new Error(`job ${id} is not running: ${JSON.stringify(before)}`);
  return waitFor(
    async () => {
      await t.query(
        `UPDATE ${t.jobs} SET locked_at = now() - interval '1 hour'
         WHERE id = $1 AND status = 'running' AND attempts = $2`,
        [id, before.attempts],
      );
      await t.skiplock.sweep();
      const row = await t.row(id);
      return row && (row.status !== 'running' || row.attempts !== before.attempts) ? row : undefined;
    },
    10_000,
    `the sweeper to reclaim job ${id}`,
    () => t.row(id),
  );
}

/** A running job's lease as {@link waitForFreshLeases} reads it: its age in milliseconds. */
export interface LeaseAge {
  status: string;
  attempts: number;
  age_ms: number;
}

/**
 * Waits (20 s at most) until jobs `ids` have run for 1.5 visibility timeouts
 * since `startedAt` (a `Date.now()`) while every lease is younger than half a
 * visibility timeout: heartbeats kept them. Resolves with the jobs' leases then.
 */
export async function waitForFreshLeases(
  t: TestContext,
  ids: string[],
  startedAt: number,
  visibilityTimeoutMs: number,
  what: string,
): Promise<LeaseAge[]> {
  const leases = () =>
    t.query<LeaseAge>(
      `SELECT status, attempts, (EXTRACT(EPOCH FROM now() - locked_at) * 1000)::int AS age_ms
         FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
      [ids],
    );
  return waitFor(
    async () => {
      const now = await leases();
      const ranLongEnough = Date.now() - startedAt > visibilityTimeoutMs * 1.5;
      return ranLongEnough && now.every((r) => r.age_ms < visibilityTimeoutMs / 2) ? now : undefined;
    },
    20_000,
    what,
    leases,
  );
}
