import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Job, Skiplock, type SkiplockError } from '../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from './support/database.js';
import { startTestServer, type TestServer } from './support/pg-server.js';

describe('LISTEN connection terminated by the server', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.close();
  });

  it('is re-established, polls once, and wakes on NOTIFY again', async () => {
    const skiplock = db.skiplock();
    const ran: string[] = [];
    const errors: string[] = [];
    // A poll slower than the test: only NOTIFY can wake this worker in time.
    const worker = skiplock.worker({
      handleSignals: false,
      pollIntervalMs: 600_000,
      queues: ['listen'],
      handlers: {
        ping: (job) => {
          ran.push(job.id);
        },
      },
    });
    worker.on('error', (error, source) => errors.push(`${source}: ${error.code}`));
    let listens = 0;
    worker.on('worker:listen', () => listens++);
    await worker.start();
    const first = await skiplock.enqueue('ping', {}, { queue: 'listen' });
    await waitFor(() => ran.includes(first.id), 5000, 'the first job');

    expect(listens).toBe(1);
    const killed = await db.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND query LIKE 'LISTEN %'`,
    );
    expect(killed[0]!.n).toBe(1);
    await waitFor(() => listens === 2, 10_000, 'the LISTEN connection to come back');
    expect(errors).toContain('notifier: DATABASE');

    const second = await skiplock.enqueue('ping', {}, { queue: 'listen' });
    await waitFor(() => ran.includes(second.id), 5000, 'a job woken by NOTIFY after reconnecting');
    await worker.stop();
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
    await skiplock.migrate();
    const ran = new Set<string>();
    const errors: SkiplockError[] = [];
    const worker = skiplock.worker({
      handleSignals: false,
      pollIntervalMs: 250,
      queues: ['restart'],
      handlers: {
        work: (job) => {
          ran.add(job.id);
        },
      },
    });
    worker.on('error', (error) => errors.push(error));
    let listens = 0;
    worker.on('worker:listen', () => listens++);
    await worker.start();
    const before = await skiplock.enqueueMany(
      Array.from({ length: 20 }, () => ({ kind: 'work', payload: {}, queue: 'restart' })),
    );
    await waitFor(() => before.every((j) => ran.has(j.id)), 10_000, 'jobs before the restart');

    await server.stop();
    await waitFor(() => errors.length > 0, 10_000, 'the worker to notice the server is gone');
    await server.start();

    const after = await waitFor<Job[] | undefined>(
      () =>
        skiplock
          .enqueueMany(Array.from({ length: 20 }, () => ({ kind: 'work', payload: {}, queue: 'restart' })))
          .catch(() => undefined),
      20_000,
      'enqueue after the restart',
    );
    await waitFor(() => listens >= 2, 20_000, 'the LISTEN connection to come back');
    await waitFor(() => after.every((j) => ran.has(j.id)), 20_000, 'jobs after the restart');
    // Their results are written in the background: every job's row goes.
    const left = async () =>
      (await pool.query(`SELECT count(*)::int AS n FROM "${TEST_SCHEMA.replaceAll('"', '""')}".jobs`)).rows[0]
        .n as number;
    await waitFor(async () => (await left()) === 0, 20_000, 'every result to be written');
    expect(await left()).toBe(0);
    expect(errors.every((e) => e.code === 'DATABASE')).toBe(true);
    await worker.stop();
    await skiplock.close();
    await pool.end();
  });
});
