/** skiplock across real processes: concurrent claims, SIGKILL, signals, concurrent migrations. */
import type { ChildProcess } from 'node:child_process';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadMigrations } from '../src/migrations/migrator.js';
import { countRows, tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { exited, forkScript, killedAfterTest, sent, startWorkerProcess } from './support/processes.js';

const t = useTestDatabase();

beforeEach(async () => {
  // Job ids start again in each test's schema: each test gets an effects table of its own.
  await t.query('DROP TABLE IF EXISTS effects');
  await t.query('CREATE TABLE effects (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL)');
});

/** Child processes of the test, killed after it whatever happened. */
const owned = (child: ChildProcess) => killedAfterTest(t, child);

function env(queue: string, options: Record<string, unknown> = {}, delayMs = 0) {
  return {
    SKIPLOCK_URL: t.db.url,
    SKIPLOCK_SCHEMA: t.schema,
    HANDLER_DELAY_MS: String(delayMs),
    WORKER_OPTIONS: JSON.stringify({ queues: [queue], pollIntervalMs: 200, ...options }),
  };
}

/** Running jobs per worker id, for diagnostics. */
const runningBy = () =>
  t.query(
    `SELECT locked_by, count(*)::int AS n FROM ${t.jobs} WHERE status = 'running' GROUP BY 1 ORDER BY 1`,
  );

describe('real processes', () => {
  it('four processes never run the same attempt; every job runs exactly once', async () => {
    const workers = await Promise.all(
      Array.from({ length: 4 }, async () =>
        owned(await startWorkerProcess(env('race', { concurrency: 10, batchSize: 5 }))),
      ),
    );
    // A start barrier: while this lock is held no handler can write its effect, so no process can
    // drain the queue before all four have claimed jobs.
    const barrier = await t.db.pool.connect();
    let jobs: { id: string }[];
    try {
      await barrier.query('BEGIN');
      await barrier.query('LOCK TABLE effects IN EXCLUSIVE MODE');
      jobs = await t.skiplock.enqueueMany(
        Array.from({ length: 2000 }, (_, i) => ({ kind: 'effect', payload: { i }, queue: 'race' })),
      );
      await waitFor(
        async () => (await runningBy()).length === 4,
        30_000,
        'each of the four processes to hold running jobs',
        runningBy,
      );
      await barrier.query('COMMIT');
    } finally {
      barrier.release();
    }
    await waitFor(
      async () => (await t.jobCount()) === 0,
      60_000,
      'the queue to drain',
      () => t.query(`SELECT status, count(*)::int AS n FROM ${t.jobs} GROUP BY 1`),
    );
    for (const w of workers) w.kill('SIGTERM');
    // The worker stops gracefully, then re-raises SIGTERM so the process ends as it would have.
    expect(await Promise.all(workers.map(exited))).toEqual(['SIGTERM', 'SIGTERM', 'SIGTERM', 'SIGTERM']);
    const [stats] = await t.query(
      `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs, max(attempts) AS max_attempts,
              count(DISTINCT pid)::int AS pids
       FROM effects WHERE job_id = ANY($1::bigint[])`,
      [jobs.map((j) => j.id)],
    );
    expect(stats).toEqual({ runs: 2000, distinct_jobs: 2000, max_attempts: 1, pids: 4 });
  }, 120_000);

  it('a worker killed with SIGKILL loses no job: its leases are reclaimed and run elsewhere', async () => {
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ kind: 'effect', payload: { i }, queue: 'crash' })),
    );
    // Its handlers never finish on their own: it holds exactly its ten leases when it dies. Its leases
    // are stamped with a short visibility timeout, and it does not sweep them itself.
    const victim = owned(
      await startWorkerProcess(
        env('crash', { concurrency: 10, visibilityTimeoutMs: 2000, sweepIntervalMs: 600_000 }, 600_000),
      ),
    );
    await waitFor(
      async () => (await t.jobCount("status = 'running'")) === 10,
      20_000,
      'the victim to hold ten leases',
      runningBy,
    );
    victim.kill('SIGKILL');
    expect(await exited(victim)).toBe('SIGKILL');
    const running = await t.query<{ id: string }>(`SELECT id FROM ${t.jobs} WHERE status = 'running'`);
    expect(running).toHaveLength(10);
    const survivor = owned(
      await startWorkerProcess(env('crash', { concurrency: 10, sweepIntervalMs: 200 }, 1)),
    );
    await waitFor(
      async () => (await t.jobCount()) === 0,
      60_000,
      'the queue to drain after the crash',
      () => t.query(`SELECT status, attempts, count(*)::int AS n FROM ${t.jobs} GROUP BY 1, 2`),
    );
    survivor.kill('SIGTERM');
    expect(await exited(survivor)).toBe('SIGTERM');
    const [all] = await t.query(
      `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS distinct_jobs FROM effects
       WHERE job_id = ANY($1::bigint[])`,
      [jobs.map((j) => j.id)],
    );
    expect(all).toEqual({ runs: 200, distinct_jobs: 200 });
    // The killed process's leased jobs ran again, as attempt 2, and only then.
    const again = await t.query(
      'SELECT attempts, count(*)::int AS n FROM effects WHERE job_id = ANY($1::bigint[]) GROUP BY 1',
      [running.map((r) => r.id)],
    );
    expect(again).toEqual([{ attempts: 2, n: 10 }]);
  }, 120_000);
});

describe('signals', () => {
  it('SIGTERM stops every worker of the process gracefully before the process ends', async () => {
    const child = owned(
      forkScript('./two-workers-process.ts', {
        SKIPLOCK_URL: t.db.url,
        SKIPLOCK_SCHEMA: t.schema,
        SLOW_MS: '1500',
      }),
    );
    await sent(child, 'ready');
    const slowStarted = sent(child, 'slow-started');
    const slowJob = await t.skiplock.enqueue('effect', {}, { queue: 'slow' });
    await slowStarted;
    child.kill('SIGTERM');
    expect(await exited(child)).toBe('SIGTERM');
    // The slow worker finished its job within its shutdown timeout, though the fast one stopped at once.
    expect(await countRows(t.db.pool, 'effects', 'job_id = $1', [slowJob.id])).toBe(1);
    expect(await t.skiplock.getJob(slowJob.id)).toBeUndefined();
  });
});

describe('migrations', () => {
  it('processes migrating one fresh schema at once all succeed', async () => {
    const schema = `${t.schema}_fresh`;
    const children = Array.from({ length: 4 }, () =>
      owned(forkScript('./migrate-process.ts', { SKIPLOCK_URL: t.db.url, SKIPLOCK_SCHEMA: schema })),
    );
    // All connected before any migrates, so the migrations really run at once.
    await Promise.all(children.map((child) => sent(child, 'ready')));
    for (const child of children) child.send('go');
    expect(await Promise.all(children.map(exited))).toEqual([0, 0, 0, 0]);
    expect(await t.query(`SELECT version, name FROM ${tableIn(schema, 'migrations')}`)).toEqual(
      loadMigrations().map(({ version, name }) => ({ version, name })),
    );
  });
});
