/**
 * Long transaction: another session holds a REPEATABLE READ snapshot open
 * while workers drain a sustained stream of jobs (so no dead tuple of the jobs
 * table can be vacuumed). No error, every job done exactly once, the drain
 * after the snapshot ends finishes, and the queue's own sessions never idle in
 * a transaction for seconds. Throughput before, during and after is reported,
 * not asserted: on a loaded machine a ratio says more about the machine.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { countRows, waitFor } from '../support/database.js';
import { effectTables, figure, startWorker, useChaosDatabase, workerConfig } from './support/cluster.js';

const t = useChaosDatabase();

/**
 * The longest a queue session may idle inside a transaction. Its transactions
 * are single statements or a lock and a statement; a loaded machine can pause a
 * process between two for a moment, not for this long.
 */
const IDLE_IN_TRANSACTION_LIMIT_MS = 5000;

/** Samples pg_stat_activity: the longest `idle in transaction` seen among the given sessions. */
function watchIdleInTransaction(client: pg.PoolClient, appNames: string[]) {
  let longestMs = 0;
  let samples = 0;
  let failure: unknown;
  let running: Promise<void> | undefined;
  const timer = setInterval(() => {
    running ??= client
      .query<{ ms: number | null }>(
        `SELECT max(EXTRACT(EPOCH FROM clock_timestamp() - state_change) * 1000)::float8 AS ms
         FROM pg_stat_activity
         WHERE application_name = ANY($1::text[]) AND state LIKE 'idle in transaction%'`,
        [appNames],
      )
      .then(({ rows }) => {
        samples++;
        longestMs = Math.max(longestMs, rows[0]?.ms ?? 0);
      })
      .catch((error: unknown) => {
        failure = error;
      })
      .finally(() => {
        running = undefined;
      });
  }, 50);
  return {
    async stop() {
      clearInterval(timer);
      await running;
      if (failure) throw failure;
      return { longestMs, samples };
    },
  };
}

async function drain(
  queue: string,
  count: number,
): Promise<{ ms: number; perSecond: number; ids: string[] }> {
  const started = Date.now();
  const jobs = Array.from({ length: count }, (_, n) => ({ kind: 'effect', payload: { n }, queue }));
  const ids = (await t.skiplock.enqueueMany(jobs)).map((j) => j.id);
  const left = () => t.jobCount('id = ANY($1::bigint[])', [ids]);
  // Deleted on success: done when none of them is left in the jobs table.
  await waitFor(async () => (await left()) === 0, 120_000, `${count} jobs of ${queue} to be done`, left);
  const ms = Date.now() - started;
  return { ms, perSecond: Math.round((count / ms) * 1000), ids };
}

describe('chaos: long transaction', () => {
  it('a held REPEATABLE READ snapshot slows nothing into errors or losses, and the queue drains after it', async () => {
    const queue = 'long-tx';
    const workers = await Promise.all(
      [0, 1].map(async () => {
        return startWorker(t, workerConfig(t, { queues: [queue], concurrency: 8, onSuccess: 'delete' }));
      }),
    );
    const monitor = await t.db.pool.connect();
    const holder = await t.db.pool.connect();
    const watch = watchIdleInTransaction(
      monitor,
      workers.map((w) => w.config.appName),
    );
    let held: number;
    try {
      const perPhase = 2000;
      const before = await drain(queue, perPhase);

      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const snapshot = await countRows(holder, t.jobs);
      const during = await drain(queue, perPhase);
      const during2 = await drain(queue, perPhase);
      // The snapshot is still the one taken before: the workers' changes are invisible to it.
      const still = await countRows(holder, t.jobs);
      expect(still).toBe(snapshot);
      const [age] = (
        await holder.query<{ ms: number }>(
          'SELECT (EXTRACT(EPOCH FROM clock_timestamp() - xact_start) * 1000)::float8 AS ms FROM pg_stat_activity WHERE pid = pg_backend_pid()',
        )
      ).rows;
      held = Math.round(age!.ms);
      await holder.query('COMMIT');

      const after = await drain(queue, perPhase);
      const { longestMs, samples } = await watch.stop();
      const allIds = [...before.ids, ...during.ids, ...during2.ids, ...after.ids];
      const [effects] = await t.query<{ jobs: number; deliveries: number }>(
        `SELECT count(*)::int AS jobs, COALESCE(sum(deliveries), 0)::int AS deliveries
         FROM ${effectTables(t.schema).effects} WHERE job_id = ANY($1::bigint[])`,
        [allIds],
      );
      const errors = workers.flatMap((w) => w.errors);
      figure('long-transaction', {
        jobs: allIds.length,
        kills: 0,
        restarts: 0,
        effects: effects!.jobs,
        duplicates: effects!.deliveries - effects!.jobs,
        lost: allIds.length - effects!.jobs,
        heldMs: held,
        beforePerS: before.perSecond,
        duringPerS: Math.round((during.perSecond + during2.perSecond) / 2),
        afterPerS: after.perSecond,
        errors: errors.length,
        idleInTxMaxMs: Math.round(longestMs),
        samples,
      });
      expect(errors).toEqual([]);
      expect(effects).toEqual({ jobs: allIds.length, deliveries: allIds.length });
      expect(samples).toBeGreaterThan(10);
      expect(longestMs).toBeLessThan(IDLE_IN_TRANSACTION_LIMIT_MS);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      monitor.release();
      await watch.stop().catch(() => {});
    }
    await Promise.all(workers.map((w) => w.shutdown()));
  });
});
