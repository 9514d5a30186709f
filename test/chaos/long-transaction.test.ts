/**
 * Long transaction: another session holds a REPEATABLE READ snapshot open
 * while workers drain a sustained stream of jobs (so no dead tuple of the jobs
 * table can be vacuumed). No error, every job done exactly once, throughput
 * recovers after the snapshot ends, and the queue's own sessions are never
 * `idle in transaction` for more than a second.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Skiplock } from '../../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from '../support/database.js';
import {
  createEffectTables,
  figure,
  startWorker,
  type WorkerProcess,
  workerConfig,
} from './support/cluster.js';

let db: TestDatabase;
let skiplock: Skiplock;
const processes: WorkerProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
  await createEffectTables(db.pool);
});
afterAll(async () => {
  await Promise.all(processes.map((p) => p.shutdown(2000)));
  await db?.close();
});

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
  const ids = (await skiplock.enqueueMany(jobs)).map((j) => j.id);
  // Deleted on success: done when none of them is left in the jobs table.
  await waitFor(
    async () => {
      const [row] = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${db.jobs} WHERE id = ANY($1::bigint[])`,
        [ids],
      );
      return row!.n === 0;
    },
    120_000,
    `${count} jobs of ${queue} to be done`,
  );
  const ms = Date.now() - started;
  return { ms, perSecond: Math.round((count / ms) * 1000), ids };
}

describe('chaos: long transaction', () => {
  it('a held REPEATABLE READ snapshot slows nothing into errors, and throughput recovers', async () => {
    const queue = 'long-tx';
    const workers = await Promise.all(
      [0, 1].map(async () => {
        const p = await startWorker(
          workerConfig(db.url, { queues: [queue], concurrency: 8, onSuccess: 'delete' }),
        );
        processes.push(p);
        return p;
      }),
    );
    const monitor = await db.pool.connect();
    const holder = await db.pool.connect();
    const watch = watchIdleInTransaction(
      monitor,
      workers.map((w) => w.config.appName),
    );
    let held: number;
    try {
      const perPhase = 2000;
      const before = await drain(queue, perPhase);

      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const [snapshot] = (await holder.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs}`))
        .rows;
      const during = await drain(queue, perPhase);
      const during2 = await drain(queue, perPhase);
      // The snapshot is still the one taken before: the workers' changes are invisible to it.
      const [still] = (await holder.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs}`)).rows;
      expect(still!.n).toBe(snapshot!.n);
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
      const [effects] = await db.query<{ jobs: number; deliveries: number }>(
        `SELECT count(*)::int AS jobs, COALESCE(sum(deliveries), 0)::int AS deliveries
         FROM chaos_effects WHERE job_id = ANY($1::bigint[])`,
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
      // Recovered: after the snapshot ends, at least a third of the throughput before it.
      expect(after.perSecond).toBeGreaterThanOrEqual(before.perSecond / 3);
      expect(samples).toBeGreaterThan(10);
      expect(longestMs).toBeLessThan(1000);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
      monitor.release();
      await watch.stop().catch(() => {});
    }
    await Promise.all(workers.map((w) => w.shutdown()));
  });
});
