/**
 * Database restart and connection loss. Workers whose server restarts, or whose
 * connections (LISTEN included) are terminated from the server side, survive,
 * reconnect, finish every job, and wake on NOTIFY again: with a 60 s poll, a
 * job enqueued after the reconnection still runs within a couple of seconds.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Skiplock } from '../../src/index.js';
import { countRows, TEST_SCHEMA, tableIn, waitFor } from '../support/database.js';
import { startTestServer, type TestServer } from '../support/pg-server.js';
import {
  createEffectTables,
  effectTables,
  expectEveryJobDone,
  startWorker,
  type Target,
  tally,
  tallyFigure,
  useChaosDatabase,
  waitUntilSettled,
  workerConfig,
} from './support/cluster.js';

const t = useChaosDatabase();

const SLOW_POLL_MS = 60_000;
/**
 * How long a probe job may take: a quarter of the poll interval, so only a
 * NOTIFY can have woken the worker, with room for a loaded machine.
 */
const PROBE_DEADLINE_MS = SLOW_POLL_MS / 4;

async function enqueueEffects(skiplock: Skiplock, count: number): Promise<string[]> {
  const jobs = Array.from({ length: count }, (_, n) => ({ kind: 'effect', payload: { n } }));
  return (await skiplock.enqueueMany(jobs)).map((j) => j.id);
}

async function deliveries(pool: pg.Pool, schema: string, ids: string[]): Promise<number> {
  return countRows(pool, effectTables(schema).deliveries, 'job_id = ANY($1::bigint[])', [ids]);
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
    const status = async () =>
      (await pool.query(`SELECT status FROM ${tableIn(skiplock.schema, 'jobs')} WHERE id = $1`, [job.id]))
        .rows[0]?.status;
    await waitFor(
      async () => (await status()) === 'succeeded',
      PROBE_DEADLINE_MS,
      `probe ${i} to run (woken by NOTIFY)`,
      status,
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

/** Two worker processes with a 60 s poll: only NOTIFY wakes them in time. */
function slowPollingWorkers(target: Target) {
  return Promise.all(
    [0, 1].map(() =>
      startWorker(
        t,
        workerConfig(target, { concurrency: 4, pollIntervalMs: SLOW_POLL_MS, visibilityTimeoutMs: 3000 }),
      ),
    ),
  );
}

describe('chaos: database restart', () => {
  it('workers survive a server restart, reconnect, wake on NOTIFY and finish every job', async () => {
    const server: TestServer = await startTestServer();
    // Cleanups run last registered first: the processes stop, then the pool ends, then the server goes.
    t.defer(() => server.destroy());
    const pool = new pg.Pool({ connectionString: server.url, max: 4 });
    pool.on('error', () => {});
    t.defer(() => pool.end());
    const target = { url: server.url, schema: TEST_SCHEMA };
    const skiplock = new Skiplock({ pool, schema: target.schema });
    t.defer(() => skiplock.close());
    await skiplock.migrate();
    await createEffectTables(pool, target.schema);

    const workers = await slowPollingWorkers(target);
    const ids = await enqueueEffects(skiplock, 1500);
    const done = () => deliveries(pool, target.schema, ids);
    await waitFor(async () => (await done()) >= 300, 60_000, '300 jobs done before the restart', done);

    const marks = workers.map((w) => w.messages.length);
    await server.stop();
    await server.start();
    // Each worker listens again (a LISTEN connection made after the restart).
    for (const [i, w] of workers.entries()) await w.next('listen', () => true, 60_000, marks[i]);
    const settling = Date.now();
    await waitUntilSettled(pool, target.schema, ids, 90_000);
    const settleMs = Date.now() - settling;
    const probeMs = await probeWakeUps(skiplock, pool);
    for (const w of workers) expect(await listeningBackends(pool, w.config.appName)).toBe(1);
    const counted = await tally(pool, target.schema, ids);
    const errors = workers.reduce((n, w) => n + w.errors.length, 0);
    tallyFigure('database-restart', counted, {
      kills: 0,
      restarts: 1,
      workerErrors: errors,
      settleMs,
      probeMs,
    });
    expectEveryJobDone(counted);
    for (const w of workers) expect(w.alive).toBe(true);
    // The workers saw the restart (and reported it as errors) rather than missing it.
    expect(errors).toBeGreaterThan(0);
    await Promise.all(workers.map((w) => w.shutdown()));
    for (const w of workers) expect(w.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});

describe('chaos: connection loss', () => {
  it('workers whose connections are terminated server-side reconnect and finish every job', async () => {
    const workers = await slowPollingWorkers(t);
    const probeBeforeMs = await probeWakeUps(t.skiplock, t.db.pool, 1);
    const ids = await enqueueEffects(t.skiplock, 1500);
    const done = () => deliveries(t.db.pool, t.schema, ids);
    let terminated = 0;
    for (let round = 1; round <= 2; round++) {
      await waitFor(
        async () => (await done()) >= round * 400,
        60_000,
        `${round * 400} jobs done before termination ${round}`,
        done,
      );
      const listenMarks = workers.map((w) => w.messages.length);
      const [row] = await t.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = ANY($1::text[])`,
        [workers.flatMap((w) => [w.config.appName, `${w.config.appName}-effects`])],
      );
      terminated += row!.n;
      for (const [i, w] of workers.entries()) await w.next('listen', () => true, 30_000, listenMarks[i]);
    }
    const settling = Date.now();
    // Well below the 60 s poll: retries are woken by their own due times (engine bug 7 was that they were not).
    await waitUntilSettled(t.db.pool, t.schema, ids, 45_000);
    const settleMs = Date.now() - settling;
    const probeMs = await probeWakeUps(t.skiplock, t.db.pool);
    for (const w of workers) expect(await listeningBackends(t.db.pool, w.config.appName)).toBe(1);
    const counted = await tally(t.db.pool, t.schema, ids);
    tallyFigure('connection-loss', counted, {
      kills: 0,
      restarts: 0,
      terminated,
      settleMs,
      probeBeforeMs,
      probeMs,
    });
    // Each worker had at least its LISTEN connection and one pooled connection, twice.
    expect(terminated).toBeGreaterThanOrEqual(2 * 2 * workers.length);
    expectEveryJobDone(counted);
    for (const w of workers) expect(w.alive).toBe(true);
    await Promise.all(workers.map((w) => w.shutdown()));
    for (const w of workers) expect(w.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});

describe('chaos: connection lost inside a maintenance transaction', () => {
  // Regression test of engine bug 1: withTransaction checked a client out with pool.connect()
  // and attached no 'error' listener; pg emits 'error' on a client whose connection dies, so
  // the process died with "Unhandled 'error' event" instead of retrying (SPEC §5).
  it('a worker survives losing its connection in the middle of a maintenance transaction', async () => {
    const worker = await startWorker(t, workerConfig(t, { sweepIntervalMs: 50 }));
    const locker = await t.db.pool.connect();
    try {
      // The next maintenance transaction's first statement on the jobs table waits for this
      // lock: the sweep's, or the kept parents' pass that runs after it on the same loop
      // (which one is a race). Either is inside the transaction that holds the maintenance lock.
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${t.jobs} IN ACCESS EXCLUSIVE MODE`);
      const inMaintenance = `SELECT a.pid FROM pg_stat_activity a
         WHERE a.application_name = $1 AND a.wait_event_type = 'Lock' AND a.state = 'active'
           AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)`;
      const [blocked] = await waitFor(
        async () => {
          const rows = await t.query<{ pid: number }>(inMaintenance, [worker.config.appName]);
          return rows.length === 1 ? rows : undefined;
        },
        10_000,
        'a maintenance transaction to wait for the lock',
      );
      const mark = worker.messages.length;
      await t.query('SELECT pg_terminate_backend($1)', [blocked!.pid]);
      await Promise.race([
        worker.next('error', (m) => m.source === 'sweep' || m.source === 'parents', 10_000, mark),
        worker.exited,
      ]);
      await locker.query('ROLLBACK');
    } finally {
      locker.release();
    }
    expect(worker.exit).toBeUndefined();
    expect(worker.alive).toBe(true);
  });
});
