/**
 * Group limits through a database restart: four worker processes drain a
 * queue with groupConcurrency 1 while the server restarts; no two jobs of one
 * key ever run at once (running counts per key sampled every 10 ms, and the
 * handlers' own start and end times), and every job runs.
 */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { Skiplock } from '../../src/index.js';
import { TEST_SCHEMA, tableIn, waitFor } from '../support/database.js';
import { startTestServer } from '../support/pg-server.js';
import { exited, forkScript, killedAfterTest, sent } from '../support/processes.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function workerProcess(url: string): Promise<ChildProcess> {
  const child = killedAfterTest(
    { defer: (cleanup) => cleanups.push(cleanup) },
    forkScript('../processes/groups-worker-process.ts', {
      SKIPLOCK_URL: url,
      SKIPLOCK_SCHEMA: TEST_SCHEMA,
      HANDLER_DELAY_MS: '10',
      WORKER_OPTIONS: JSON.stringify({ queues: ['keyed'], concurrency: 4, pollIntervalMs: 200 }),
    }),
  );
  await sent(child, 'ready');
  return child;
}

describe('chaos: group limits and a database restart', () => {
  it('groupConcurrency 1 holds across four processes while the server restarts, and every job runs', async () => {
    const server = await startTestServer();
    cleanups.push(() => server.destroy());
    const pool = new pg.Pool({ connectionString: server.url, max: 4 });
    pool.on('error', () => {});
    cleanups.push(() => pool.end());
    const skiplock = new Skiplock({ pool, schema: TEST_SCHEMA });
    cleanups.push(() => skiplock.close());
    await skiplock.migrate();
    await pool.query(
      `CREATE TABLE runs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id bigint NOT NULL,
         attempts int NOT NULL, group_key text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`,
    );
    await skiplock.setQueueLimits('keyed', { groupConcurrency: 1 });
    const jobs = tableIn(TEST_SCHEMA, 'jobs');

    // Samples each key's running count every 10 ms, reconnecting through the restart.
    let sampling = true;
    let max = 0;
    let samples = 0;
    const sampler = (async () => {
      while (sampling) {
        const client = new pg.Client({ connectionString: server.url });
        client.on('error', () => {});
        try {
          await client.connect();
          while (sampling) {
            const { rows } = await client.query<{ n: number }>(
              `SELECT COALESCE(max(n), 0)::int AS n FROM (
                 SELECT count(*) AS n FROM ${jobs} WHERE queue = 'keyed' AND status = 'running' GROUP BY group_key) c`,
            );
            max = Math.max(max, rows[0]!.n);
            samples++;
            await sleep(10);
          }
        } catch {
          await sleep(50);
        } finally {
          await client.end().catch(() => {});
        }
      }
    })();
    cleanups.push(async () => {
      sampling = false;
      await sampler;
    });

    const workers = await Promise.all(Array.from({ length: 4 }, () => workerProcess(server.url)));
    const enqueued = await skiplock.enqueueMany(
      Array.from({ length: 300 }, (_, i) => {
        const key = `k${i % 6}`;
        return { kind: 'work', payload: { key }, queue: 'keyed', groupKey: key };
      }),
    );
    const ended = async () =>
      (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM runs WHERE ended_at IS NOT NULL'))
        .rows[0]!.n;
    await waitFor(async () => (await ended()) >= 60, 60_000, '60 runs before the restart', ended);
    await server.stop();
    await server.start();
    const left = async () =>
      (
        await pool
          .query<{ n: number }>(`SELECT count(*)::int AS n FROM ${jobs}`)
          .catch(() => ({ rows: [{ n: -1 }] }))
      ).rows[0]!.n;
    await waitFor(async () => (await left()) === 0, 180_000, 'the queue to drain after the restart', left);
    sampling = false;
    await sampler;
    for (const child of workers) child.kill('SIGTERM');
    await Promise.all(workers.map(exited));

    expect(samples).toBeGreaterThan(20);
    expect(max).toBe(1);
    const { rows: overlaps } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM runs a JOIN runs b
         ON a.group_key = b.group_key AND a.id < b.id
        AND a.started_at < b.ended_at AND b.started_at < a.ended_at`,
    );
    expect(overlaps).toEqual([{ n: 0 }]);
    const { rows: ran } = await pool.query(
      'SELECT count(DISTINCT job_id)::int AS jobs FROM runs WHERE ended_at IS NOT NULL AND job_id = ANY($1::bigint[])',
      [enqueued.map((j) => j.id)],
    );
    expect(ran).toEqual([{ jobs: 300 }]);
  });
});
