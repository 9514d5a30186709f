/**
 * A worker in a process of its own, for tests that need real processes
 * (concurrency across processes, SIGKILL). Configured by environment:
 * SKIPLOCK_URL, SKIPLOCK_SCHEMA, WORKER_OPTIONS (JSON), HANDLER_DELAY_MS.
 * Every run writes a row to `effects` (job_id, attempts, pid) before finishing,
 * so tests can count deliveries. Sends 'ready' over IPC once started.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { databaseFromEnv, startWorkerFromEnv } from './worker-from-env.js';

const db = databaseFromEnv<{ effect: unknown }>();
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);

await startWorkerFromEnv(db, {
  effect: async (job) => {
    if (delayMs > 0) await sleep(delayMs);
    await db.pool.query('INSERT INTO effects (job_id, attempts, pid) VALUES ($1, $2, $3)', [
      job.id,
      job.attempts,
      process.pid,
    ]);
  },
});
