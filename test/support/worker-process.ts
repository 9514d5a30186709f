/**
 * A worker in a process of its own, for tests that need real processes
 * (concurrency across processes, SIGKILL). Configured by environment:
 * SKIPLOCK_URL, SKIPLOCK_SCHEMA, WORKER_OPTIONS (JSON), HANDLER_DELAY_MS.
 * Every run writes a row to `effects` (job_id, attempts, pid) before finishing,
 * so tests can count deliveries. Sends 'ready' over IPC once started.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Skiplock } from '../../src/index.js';
import { STOP } from './events.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);

const worker = skiplock.worker({
  handleSignals: true,
  ...JSON.parse(process.env.WORKER_OPTIONS ?? '{}'),
  handlers: {
    effect: async (job) => {
      if (delayMs > 0) await sleep(delayMs);
      await pool.query('INSERT INTO effects (job_id, attempts, pid) VALUES ($1, $2, $3)', [
        job.id,
        job.attempts,
        process.pid,
      ]);
    },
  },
});
worker.on('error', () => {});
worker.on(STOP, () => {
  void pool.end();
});
await worker.start();
process.send?.('ready');
