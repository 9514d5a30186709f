/**
 * A worker in a process of its own, for the queue-limit tests across
 * processes. Configured by environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA,
 * WORKER_OPTIONS (JSON), HANDLER_DELAY_MS. Its one handler, `work`, records
 * when it started (this process's clock) in the `starts` table, then sleeps
 * HANDLER_DELAY_MS. Sends 'ready' over IPC once started.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Skiplock } from '../../src/index.js';
import { STOP } from '../support/events.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);

const worker = skiplock.worker({
  handleSignals: true,
  ...JSON.parse(process.env.WORKER_OPTIONS ?? '{}'),
  handlers: {
    work: async (job) => {
      const startedAt = new Date();
      await pool.query('INSERT INTO starts (job_id, attempts, pid, started_at) VALUES ($1, $2, $3, $4)', [
        job.id,
        job.attempts,
        process.pid,
        startedAt,
      ]);
      if (delayMs > 0) await sleep(delayMs);
    },
  },
});
worker.on('error', () => {});
worker.on(STOP, () => {
  void pool.end();
});
await worker.start();
process.send?.('ready');
