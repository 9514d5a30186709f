/**
 * Database restart and connection loss. Workers whose server restarts, or whose
 * connections (LISTEN included) are terminated from the server side, survive,
 * reconnect, finish every job, and wake on NOTIFY again: with a 60 s poll, a
 * job enqueued after the reconnection still runs within a couple of seconds.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Skiplock } from '../../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from '../support/database.js';
import { startTestServer, type TestServer } from '../support/pg-server.js';
import {
  createEffectTables,
  figure,
  tally,
  WorkerProcess,
  waitUntilSettled,
  workerConfig,
} from './support/cluster.js';

const processes: WorkerProcess[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  await Promise.all(processes.map((p) => p.shutdown(2000)));
  for (const cleanup of cleanups.reverse()) await cleanup();
});

const jobsTable = `"${TEST_SCHEMA.replaceAll('"', '""')}".jobs`;
const SLOW_POLL_MS = 60_000;

async function enqueueEffects(skiplock: Skiplock, count: number): Promise<string[]> {
  const jobs = Array.from({ length: count }, (_, n) => ({ kind: 'effect', payload: { n } }));
  return (await skiplock.enqueueMany(jobs)).map((j) => j.id);
}

async function deliveries(pool: pg.Pool, ids: string[]): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'SELECT count(DISTINCT job_id)::int AS n FROM chaos_deliveries WHERE job_id = ANY($1::bigint[])',
    [ids],
  );
  return rows[0]!.n;
}

/**
 * Enqueues probe jobs one after another and returns the longest time from
 * enqueue to done. The workers poll every 60 s, so only NOTIFY can make this
 * fast; several probes rule out a wake-up timer that happened to be due.
 */
async function probeWakeUps(skiplock: Skiplock, pool: pg.Pool, count = 3): Promise<number> {
  let slowest = 0;
  for (let i = 0; i < count; i++) {
    const started = Date.now();
    const job = await skiplock.enqueue('effect', { probe: i });
    await waitFor(
      async () => {
        const { rows } = await pool.query(`SELECT status FROM ${jobsTable} WHERE id = $1`, [job.id]);
        return rows[0]?.status === 'succeeded';
      },
      5_000,
      `probe ${i} to run (woken by NOTIFY)`,
    );
    slowest = Math.max(slowest, Date.now() - started);
  }
  return slowest;
}

async function listeningBackends(pool: pg.Pool, appName: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%'`,
    [appName],
  );
  return rows[0]!.n;
}

describe('chaos: database restart', () => {
  it('workers survive a server restart, reconnect, wake on NOTIFY and finish every job', async () => {
    const server: TestServer = await startTestServer();
    cleanups.push(() => server.destroy());
    const pool = new pg.Pool({ connectionString: server.url, max: 4 });
    pool.on('error', () => {});
    cleanups.push(() => pool.end());
    const skiplock = new Skiplock({ pool, schema: TEST_SCHEMA });
    await skiplock.migrate();
    await createEffectTables(pool);

    const workers = await Promise.all(
      [0, 1].map(async () => {
        const p = new WorkerProcess(
          workerConfig(server.url, {
            concurrency: 4,
            pollIntervalMs: SLOW_POLL_MS,
            visibilityTimeoutMs: 3000,
          }),
        );
        processes.push(p);
        return p.ready();
      }),
    );
    const ids = await enqueueEffects(skiplock, 1500);
    await waitFor(
      async () => (await deliveries(pool, ids)) >= 300,
      60_000,
      '300 jobs done before the restart',
    );

    const marks = workers.map((w) => w.messages.length);
    await server.stop();
    await server.start();
    // Each worker listens again (a LISTEN connection made after the restart).
    for (const [i, w] of workers.entries()) await w.next('listen', () => true, 60_000, marks[i]);
    const settling = Date.now();
    await waitUntilSettled(pool, jobsTable, ids, 90_000);
    const settleMs = Date.now() - settling;
    const probeMs = await probeWakeUps(skiplock, pool);
    for (const w of workers) expect(await listeningBackends(pool, w.config.appName)).toBe(1);
    const t = await tally(pool, jobsTable, ids);
    const errors = workers.reduce((n, w) => n + w.errors.length, 0);
    figure('database-restart', {
      jobs: t.jobs,
      kills: 0,
      restarts: 1,
      effects: t.effects,
      duplicates: t.duplicates,
      lost: t.lost,
      workerErrors: errors,
      settleMs,
      probeMs,
    });
    expect(t.effects).toBe(ids.length);
    expect(t.lost).toBe(0);
    expect(t.sameAttemptTwice).toBe(0);
    expect(t.finalAttemptMissing).toBe(0);
    expect(t.byStatus).toEqual({ succeeded: ids.length });
    for (const w of workers) expect(w.alive).toBe(true);
    // The workers saw the restart (and reported it as errors) rather than missing it.
    expect(errors).toBeGreaterThan(0);
    expect(probeMs).toBeLessThan(3000);
    await Promise.all(workers.map((w) => w.shutdown()));
    for (const w of workers) expect(w.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});

describe('chaos: connection loss', () => {
  let db: TestDatabase;

  it('workers whose connections are terminated server-side reconnect and finish every job', async () => {
    db = await createTestDatabase();
    cleanups.push(() => db.close());
    const skiplock = db.skiplock();
    await createEffectTables(db.pool);
    const workers = await Promise.all(
      [0, 1].map(async () => {
        const p = new WorkerProcess(
          workerConfig(db.url, { concurrency: 4, pollIntervalMs: SLOW_POLL_MS, visibilityTimeoutMs: 3000 }),
        );
        processes.push(p);
        return p.ready();
      }),
    );
    const probeBeforeMs = await probeWakeUps(skiplock, db.pool, 1);
    const ids = await enqueueEffects(skiplock, 1500);
    let terminated = 0;
    for (let round = 1; round <= 2; round++) {
      await waitFor(
        async () => (await deliveries(db.pool, ids)) >= round * 400,
        60_000,
        `${round * 400} jobs done before termination ${round}`,
      );
      const listenMarks = workers.map((w) => w.messages.length);
      const [row] = await db.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = ANY($1::text[])`,
        [workers.flatMap((w) => [w.config.appName, `${w.config.appName}-effects`])],
      );
      terminated += row!.n;
      for (const [i, w] of workers.entries()) await w.next('listen', () => true, 30_000, listenMarks[i]);
    }
    const settling = Date.now();
    // Well below the 60 s poll: retries are woken by their own due times (engine bug 7 was that they were not).
    await waitUntilSettled(db.pool, db.jobs, ids, 45_000);
    const settleMs = Date.now() - settling;
    const probeMs = await probeWakeUps(skiplock, db.pool);
    for (const w of workers) expect(await listeningBackends(db.pool, w.config.appName)).toBe(1);
    const t = await tally(db.pool, db.jobs, ids);
    figure('connection-loss', {
      jobs: t.jobs,
      kills: 0,
      restarts: 0,
      effects: t.effects,
      duplicates: t.duplicates,
      lost: t.lost,
      terminated,
      settleMs,
      probeBeforeMs,
      probeMs,
    });
    // Each worker had at least its LISTEN connection and one pooled connection, twice.
    expect(terminated).toBeGreaterThanOrEqual(2 * 2 * workers.length);
    expect(t.effects).toBe(ids.length);
    expect(t.lost).toBe(0);
    expect(t.sameAttemptTwice).toBe(0);
    expect(t.finalAttemptMissing).toBe(0);
    expect(t.byStatus).toEqual({ succeeded: ids.length });
    for (const w of workers) expect(w.alive).toBe(true);
    expect(probeMs).toBeLessThan(3000);
    await Promise.all(workers.map((w) => w.shutdown()));
    for (const w of workers) expect(w.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});

describe('chaos: connection lost inside the sweeper transaction', () => {
  // Regression test of engine bug 1: withTransaction checked a client out with pool.connect()
  // and attached no 'error' listener; pg emits 'error' on a client whose connection dies, so
  // the process died with "Unhandled 'error' event" instead of retrying (SPEC §5).
  it('a worker survives losing its connection in the middle of a sweep', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.close());
    await createEffectTables(db.pool);
    const worker = new WorkerProcess(workerConfig(db.url, { sweepIntervalMs: 50 }));
    processes.push(worker);
    await worker.ready();
    const locker = await db.pool.connect();
    try {
      // The sweep's first statement on the jobs table now waits for this lock, inside its transaction.
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.jobs} IN ACCESS EXCLUSIVE MODE`);
      await waitFor(
        async () =>
          (
            await db.query(
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'
                 AND state = 'active' AND query LIKE '%expired%'`,
              [worker.config.appName],
            )
          ).length === 1,
        10_000,
        'the sweep to wait for the lock',
      );
      const mark = worker.messages.length;
      await db.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%expired%'`,
        [worker.config.appName],
      );
      await Promise.race([worker.next('error', (m) => m.source === 'sweep', 10_000, mark), worker.exited]);
      await locker.query('ROLLBACK');
    } finally {
      locker.release();
    }
    expect(worker.exit).toBeUndefined();
    expect(worker.alive).toBe(true);
  });
});
