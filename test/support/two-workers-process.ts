/**
 * Two workers in one process, both with the default signal handling: queue
 * `fast` (instant jobs) and queue `slow` (SLOW_MS, cooperative). Writes an
 * `effects` row per finished job; sends 'ready' then 'slow-started'.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Skiplock } from '../../src/index.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const effect = (id: string, attempts: number) =>
  pool.query('INSERT INTO effects (job_id, attempts, pid) VALUES ($1, $2, $3)', [id, attempts, process.pid]);

const fast = skiplock.worker({
  queues: ['fast'],
  handlers: { effect: (job) => effect(job.id, job.attempts) },
});
const slow = skiplock.worker({
  queues: ['slow'],
  shutdownTimeoutMs: 10_000,
  handlers: {
    effect: async (job) => {
      process.send?.('slow-started');
      await sleep(Number(process.env.SLOW_MS ?? 1500));
      await effect(job.id, job.attempts);
    },
  },
});
for (const w of [fast, slow]) w.on('error', () => {});
await Promise.all([fast.start(), slow.start()]);
process.send?.('ready');
