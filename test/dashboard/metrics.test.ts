/**
 * Prometheus metrics: the gauges read from the database on scrape (from the
 * dashboard's /metrics), the counters and histogram fed by a worker's events,
 * and `skiplock worker --metrics-port`.
 */
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../../src/dashboard/index.js';
import { PermanentError } from '../../src/index.js';
import { createMetrics, serveMetrics } from '../../src/telemetry/metrics.js';
import { spawnCli } from '../cli/cli-process.js';
import { TEST_SCHEMA, waitFor } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { SEEDED, seed } from './support/seed.js';

const { db } = useFileDatabase();

beforeAll(async () => {
  await seed(db);
});

/** The value of one sample line, or undefined when the series is absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('metrics', () => {
  it("the dashboard's /metrics has jobs by queue and status and the oldest due job's age", async () => {
    const app = createDashboard(db.skiplock());
    const startedAt = Date.now();
    const res = await app.request('/metrics');
    const elapsedS = (Date.now() - startedAt) / 1000;
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await res.text();
    expect(text).toContain('# TYPE skiplock_jobs gauge');
    for (const [queue, counts] of Object.entries(SEEDED)) {
      for (const [status, count] of Object.entries(counts)) {
        expect(sample(text, `skiplock_jobs{queue="${queue}",status="${status}"}`), `${queue} ${status}`).toBe(
          count,
        );
      }
    }
    const age = sample(text, 'skiplock_oldest_due_job_age_seconds{queue="emails"}')!;
    expect(age).toBeGreaterThanOrEqual(90);
    expect(age).toBeLessThan(90 + 60 + elapsedS); // seeded 90 s before this file's first test
    expect(sample(text, 'skiplock_oldest_due_job_age_seconds{queue="media"}')).toBeLessThan(60);

    // A scrape reads the table again.
    await db.query(`UPDATE ${db.jobs} SET status = 'dead' WHERE queue = 'media' AND status = 'queued'`);
    const again = await (await app.request('/metrics')).text();
    expect(sample(again, 'skiplock_jobs{queue="media",status="queued"}')).toBe(0);
    expect(sample(again, 'skiplock_jobs{queue="media",status="dead"}')).toBe(
      SEEDED.media.dead + SEEDED.media.queued,
    );
    expect(sample(again, 'skiplock_oldest_due_job_age_seconds{queue="media"}')).toBe(0);
  });

  it("counts a worker's completions, failures by outcome and run times per kind", async () => {
    const skiplock = db.skiplock();
    const metrics = await createMetrics(skiplock, { prefix: 'app_' });
    const worker = skiplock.worker({
      queues: ['metered'],
      concurrency: 4,
      pollIntervalMs: 100,
      handleSignals: false,
      handlers: {
        ok: async () => {},
        refuse: async () => {
          throw new PermanentError('no such order');
        },
        flaky: async () => {
          throw new Error('timeout talking to the shop');
        },
      },
    });
    const stopObserving = metrics.observeWorker(worker);
    const server = await serveMetrics(metrics, { port: 0 });
    try {
      await worker.start();
      await skiplock.enqueueMany([
        { kind: 'ok', payload: {}, queue: 'metered' },
        { kind: 'ok', payload: {}, queue: 'metered' },
        { kind: 'ok', payload: {}, queue: 'metered' },
        { kind: 'refuse', payload: {}, queue: 'metered' },
        { kind: 'flaky', payload: {}, queue: 'metered', maxAttempts: 1 },
      ]);
      const text = await waitFor(
        async () => {
          const res = await fetch(server.url);
          const body = await res.text();
          return sample(body, 'app_jobs_completed_total{queue="metered",kind="ok"}') === 3 &&
            sample(body, 'app_jobs_failed_total{queue="metered",kind="refuse",outcome="failed"}') === 1 &&
            sample(body, 'app_jobs_failed_total{queue="metered",kind="flaky",outcome="dead"}') === 1
            ? body
            : undefined;
        },
        15_000,
        'the counters',
      );
      expect(sample(text, 'app_job_duration_seconds_count{queue="metered",kind="ok"}')).toBe(3);
      expect(sample(text, 'app_job_duration_seconds_bucket{le="+Inf",queue="metered",kind="ok"}')).toBe(3);
      expect(
        sample(text, 'app_jobs_failed_total{queue="metered",kind="flaky",outcome="retry"}'),
      ).toBeUndefined();
      expect(sample(text, 'app_jobs{queue="metered",status="failed"}')).toBe(1);
      expect(sample(text, 'app_jobs{queue="metered",status="dead"}')).toBe(1);
      expect((await fetch(server.url.replace('/metrics', '/'))).status).toBe(404);
    } finally {
      stopObserving();
      await worker.stop();
      await server.close();
    }
  });

  it('skiplock worker --metrics-port serves the worker counters', async () => {
    const handlers = fileURLToPath(new URL('../cli/fixtures/handlers.mjs', import.meta.url));
    const worker = spawnCli([
      'worker',
      '--handlers',
      handlers,
      '--queue',
      'metered-cli',
      '--poll-interval-ms',
      '100',
      '--metrics-port',
      '0',
      '--database-url',
      db.url,
      '--schema',
      TEST_SCHEMA,
    ]);
    try {
      await worker.waitForOutput(/metrics at http:\/\/127\.0\.0\.1:\d+\/metrics/);
      const url = /metrics at (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(worker.stdout())![1]!;
      await db.skiplock().enqueue('echo', { hello: 'metrics' }, { queue: 'metered-cli' });
      await waitFor(
        async () =>
          sample(
            await (await fetch(url)).text(),
            'skiplock_jobs_completed_total{queue="metered-cli",kind="echo"}',
          ) === 1,
        15_000,
        'the completion counter',
      );
    } finally {
      worker.child.kill('SIGTERM');
      await expect(worker.exited).resolves.toBe(0);
    }
  });
});
