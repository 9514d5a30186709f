/**
 * Worker crash, transactional handlers: worker processes on thousands of
 * transactional jobs are killed with SIGKILL at random (many of them between a
 * handler's insert and its COMMIT) and replaced. Every job's row exists exactly
 * once — counted per job, on a table without a unique key, so a duplicate
 * commit would show — and was written by the job's final attempt; no job is
 * lost, left queued or running, or dead.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { countRows, tableIn } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';
import { figure } from './support/cluster.js';
import { CRASH_RUN_KILLS, CRASH_RUN_WORKERS, crashRun } from './support/worker-fleet.js';

const t = useTestDatabase();
const effects = () => tableIn(t.schema, 'chaos_txn_effects');

beforeEach(async () => {
  await t.query(`CREATE TABLE ${effects()} (job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)`);
});

/** Committed effect rows so far. */
const committed = () => countRows(t.db.pool, effects());

describe('chaos: transactional worker crash', () => {
  it('SIGKILLed workers commit every transactional job’s effect exactly once', async () => {
    const jobCount = 5000;
    const { fleet, ids } = await crashRun(t, {
      queue: 'txn-crash',
      kind: 'txn_effect',
      jobs: jobCount,
      progress: committed,
      unit: 'effects',
    });

    const [counted] = await t.query<{
      exactly_once: number;
      missing: number;
      duplicated: number;
      not_final_attempt: number;
      reclaimed: number;
      max_attempts: number;
    }>(
      `WITH per_job AS (
         SELECT j.id, j.attempts, count(e.job_id)::int AS rows,
                bool_and(e.attempt IS NULL OR e.attempt = j.attempts) AS final_attempt
         FROM ${t.jobs} j LEFT JOIN ${effects()} e ON e.job_id = j.id
         WHERE j.id = ANY($1::bigint[])
         GROUP BY j.id, j.attempts
       )
       SELECT count(*) FILTER (WHERE rows = 1)::int AS exactly_once,
              count(*) FILTER (WHERE rows = 0)::int AS missing,
              count(*) FILTER (WHERE rows > 1)::int AS duplicated,
              count(*) FILTER (WHERE NOT final_attempt)::int AS not_final_attempt,
              count(*) FILTER (WHERE attempts > 1)::int AS reclaimed,
              max(attempts)::int AS max_attempts
       FROM per_job`,
      [ids],
    );
    const byStatus = await t.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM ${t.jobs} WHERE id = ANY($1::bigint[]) GROUP BY 1`,
      [ids],
    );
    const rowsTotal = await committed();
    figure('transactional-crash', {
      jobs: ids.length,
      kills: fleet.kills,
      restarts: fleet.spawned.length - CRASH_RUN_WORKERS,
      effects: counted!.exactly_once,
      duplicates: counted!.duplicated,
      lost: counted!.missing,
      rows: rowsTotal,
      reclaimed: counted!.reclaimed,
      maxAttempts: counted!.max_attempts,
    });
    expect(fleet.kills).toBe(CRASH_RUN_KILLS);
    expect(counted).toMatchObject({
      exactly_once: jobCount,
      missing: 0,
      duplicated: 0,
      not_final_attempt: 0,
    });
    expect(rowsTotal).toBe(jobCount);
    expect(byStatus).toEqual([{ status: 'succeeded', n: jobCount }]);
    // Each crash costs a job at most one attempt.
    expect(counted!.max_attempts).toBeLessThanOrEqual(1 + CRASH_RUN_KILLS);
    await Promise.all(fleet.alive.map((p) => p.shutdown()));
    for (const p of fleet.alive) expect(p.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
