import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Skiplock } from '../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from './support/database.js';
import { exited, startWorkerProcess } from './support/processes.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
  await db.query('CREATE TABLE effects (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL)');
});
afterAll(async () => {
  await db?.close();
});

function env(queue: string, options: Record<string, unknown> = {}, delayMs = 0) {
  return {
    SKIPLOCK_URL: db.url,
    SKIPLOCK_SCHEMA: TEST_SCHEMA,
    HANDLER_DELAY_MS: String(delayMs),
    WORKER_OPTIONS: JSON.stringify({ queues: [queue], pollIntervalMs: 200, ...options }),
  };
}

async function remaining(queue: string): Promise<number> {
  const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = $1`, [
    queue,
  ]);
  return row!.n;
}

describe('real processes', () => {
  it('four processes never run the same attempt; every job runs exactly once', async () => {
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 2000 }, (_, i) => ({ kind: 'effect', payload: { i }, queue: 'race' })),
    );
    const workers = await Promise.all(
      Array.from({ length: 4 }, () => startWorkerProcess(env('race', { concurrency: 10, batchSize: 5 }))),
    );
    await waitFor(async () => (await remaining('race')) === 0, 60_000, 'the queue to drain');
    for (const w of workers) w.kill('SIGTERM');
    // The worker stops gracefully, then re-raises SIGTERM so the process ends as it would have.
    expect(await Promise.all(workers.map(exited))).toEqual(['SIGTERM', 'SIGTERM', 'SIGTERM', 'SIGTERM']);
    const [stats] = await db.query<{
      runs: number;
      distinct_jobs: number;
      max_attempts: number;
      pids: number;
    }>(
      `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs, max(attempts) AS max_attempts,
              count(DISTINCT pid)::int AS pids
       FROM effects WHERE job_id = ANY($1::bigint[])`,
      [jobs.map((j) => j.id)],
    );
    expect(stats).toEqual({ runs: 2000, distinct_jobs: 2000, max_attempts: 1, pids: 4 });
  });

  it('a worker killed with SIGKILL loses no job: its leases are reclaimed and run elsewhere', async () => {
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ kind: 'effect', payload: { i }, queue: 'crash' })),
    );
    const options = {
      concurrency: 10,
      visibilityTimeoutMs: 1000,
      heartbeatIntervalMs: 200,
      sweepIntervalMs: 200,
    };
    const victim = await startWorkerProcess(env('crash', options, 30));
    // Kill it while it holds leases.
    await waitFor(async () => {
      const [r] = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'crash' AND status = 'running'`,
      );
      return r!.n > 0;
    });
    victim.kill('SIGKILL');
    expect(await exited(victim)).toBe('SIGKILL');
    const running = await db.query(`SELECT id FROM ${db.jobs} WHERE queue = 'crash' AND status = 'running'`);
    expect(running.length).toBeGreaterThan(0);
    const survivor = await startWorkerProcess(env('crash', options, 1));
    await waitFor(async () => (await remaining('crash')) === 0, 60_000, 'the queue to drain after the crash');
    survivor.kill('SIGTERM');
    expect(await exited(survivor)).toBe('SIGTERM');
    const [stats] = await db.query<{ distinct_jobs: number }>(
      'SELECT count(DISTINCT job_id)::int AS distinct_jobs FROM effects WHERE job_id = ANY($1::bigint[])',
      [jobs.map((j) => j.id)],
    );
    expect(stats!.distinct_jobs).toBe(200);
    // The killed process's leased jobs ran again, as attempt 2.
    const [again] = await db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM effects WHERE job_id = ANY($1::bigint[]) AND attempts = 2',
      [running.map((r) => r.id)],
    );
    expect(again!.n).toBe(running.length);
  });
});

describe('signals', () => {
  it('SIGTERM stops every worker of the process gracefully before the process ends', async () => {
    const script = fileURLToPath(new URL('./support/two-workers-process.ts', import.meta.url));
    const child = fork(script, [], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, SKIPLOCK_URL: db.url, SKIPLOCK_SCHEMA: TEST_SCHEMA, SLOW_MS: '1500' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const messages: unknown[] = [];
    child.on('message', (m) => messages.push(m));
    await waitFor(() => messages.includes('ready'), 30_000, 'the two workers');
    const slowJob = await skiplock.enqueue('effect', {}, { queue: 'slow' });
    await waitFor(() => messages.includes('slow-started'), 10_000, 'the slow job to start');
    child.kill('SIGTERM');
    expect(await exited(child)).toBe('SIGTERM');
    // The slow worker finished its job within its shutdown timeout, though the fast one stopped at once.
    const [row] = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM effects WHERE job_id = $1', [
      slowJob.id,
    ]);
    expect(row!.n).toBe(1);
    expect(await skiplock.getJob(slowJob.id)).toBeUndefined();
  });
});

describe('migrations', () => {
  it('ten processes migrating one fresh database at once all succeed', async () => {
    const fresh = await createTestDatabase(false);
    try {
      const script = fileURLToPath(new URL('./support/migrate-process.ts', import.meta.url));
      const children = Array.from({ length: 10 }, () =>
        fork(script, [], {
          execArgv: ['--import', 'tsx'],
          env: { ...process.env, SKIPLOCK_URL: fresh.url, SKIPLOCK_SCHEMA: TEST_SCHEMA },
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        }),
      );
      expect(await Promise.all(children.map(exited))).toEqual(Array(10).fill(0));
      const rows = await fresh.query(
        `SELECT version, name FROM "${TEST_SCHEMA.replaceAll('"', '""')}".migrations`,
      );
      expect(rows).toEqual([
        { version: 1, name: 'jobs' },
        { version: 2, name: 'wake_up' },
        { version: 4, name: 'queue_controls' },
      ]);
    } finally {
      await fresh.close();
    }
  });
});
