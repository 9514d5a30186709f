/**
 * A worker in a process of its own, for the queue-limit tests across
 * processes. Configured by environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA,
 * WORKER_OPTIONS (JSON), HANDLER_DELAY_MS. Its one handler, `work`, records
 * when it started (this process's clock) in the `starts` table, then sleeps
 * HANDLER_DELAY_MS. Sends 'ready' over IPC once started.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { databaseFromEnv, startWorkerFromEnv } from '../support/worker-from-env.js';

const db = databaseFromEnv<{ work: unknown }>();
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);

await startWorkerFromEnv(db, {
  work: async (job) => {
    const startedAt = new Date();
    await db.pool.query('INSERT INTO starts (job_id, attempts, pid, started_at) VALUES ($1, $2, $3, $4)', [
      job.id,
      job.attempts,
      process.pid,
      startedAt,
    ]);
    if (delayMs > 0) await sleep(delayMs);
  },
});
