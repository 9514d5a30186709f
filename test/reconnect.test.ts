import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Job, Skiplock } from '../src/index.js';
import { countRows, TEST_SCHEMA, tableIn, waitFor } from './support/database.js';
import { LISTEN, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { startTestServer, type TestServer } from './support/pg-server.js';

const t = useTestDatabase();

describe('LISTEN connection terminated by the server', () => {
  it('is re-established, polls once, and wakes on NOTIFY again', async () => {
    const ran: string[] = [];
    // A poll slower than the test: only NOTIFY can wake this worker in time.
    const worker = t.worker({
      pollIntervalMs: 600_000,
      queues: ['listen'],
      handlers: {
        ping: (job) => {
          ran.push(job.id);
        },
      },
    });
    const errors = record(worker, 'error');
    const listens = record(worker, LISTEN);
    await worker.start();
    const first = await t.skiplock.enqueue('ping', {}, { queue: 'listen' });
    await waitFor(
      () => ran.includes(first.id),
      5000,
      'the first job',
      () => ran,
    );

    expect(listens).toHaveLength(1);
    const killed = await t.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND query LIKE 'LISTEN %'`,
    );
    expect(killed[0]!.n).toBe(1);
    await waitFor(
      () => listens.length === 2,
      10_000,
      'the LISTEN connection to come back',
      () => errors,
    );
    expect(errors.map(([error, source]) => `${source}: ${error.code}`)).toContain('notifier: DATABASE');

    const second = await t.skiplock.enqueue('ping', {}, { queue: 'listen' });
    await waitFor(
      () => ran.includes(second.id),
      5000,
      'a job woken by NOTIFY after reconnecting',
      () => ran,
    );
  });
});

describe('server restart mid-run', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(async () => {
    await server?.destroy();
  });

  it('is survived: loops report errors, reconnect, and finish every job', async () => {
    const pool = new pg.Pool({ connectionString: server.url, max: 5 });
    pool.on('error', () => {});
    const skiplock = new Skiplock({ pool, schema: TEST_SCHEMA });
    t.defer(async () => {
      await skiplock.close();
      await pool.end();
    });
    await skiplock.migrate();
    const ran = new Set<string>();
    const worker = t.track(
      skiplock.worker({
        handleSignals: false,
        pollIntervalMs: 250,
        queues: ['restart'],
        handlers: {
          work: (job) => {
            ran.add(job.id);
          },
        },
      }),
    );
    const errors = record(worker, 'error');
    const listens = record(worker, LISTEN);
    await worker.start();
    const enqueue20 = () =>
      skiplock.enqueueMany(
        Array.from({ length: 20 }, () => ({ kind: 'work', payload: {}, queue: 'restart' })),
      );
    const before = await enqueue20();
    const notRun = (jobs: Job[]) => jobs.filter((j) => !ran.has(j.id)).map((j) => j.id);
    await waitFor(
      () => notRun(before).length === 0,
      10_000,
      'jobs before the restart',
      () => notRun(before),
    );

    await server.stop();
    await waitFor(() => errors.length > 0, 10_000, 'the worker to notice the server is gone');
    await server.start();

    const after = await waitFor<Job[] | undefined>(
      () => enqueue20().catch(() => undefined),
      20_000,
      'enqueue after the restart',
    );
    await waitFor(
      () => listens.length >= 2,
      20_000,
      'the LISTEN connection to come back',
      () => errors,
    );
    await waitFor(
      () => notRun(after).length === 0,
      20_000,
      'jobs after the restart',
      () => notRun(after),
    );
    // Their results are written in the background: every job's row goes.
    const left = () => countRows(pool, tableIn(TEST_SCHEMA, 'jobs'));
    await waitFor(async () => (await left()) === 0, 20_000, 'every result to be written', left);
    expect(await left()).toBe(0);
    expect(errors.filter(([e]) => e.code !== 'DATABASE')).toEqual([]);
  }, 120_000);
});
