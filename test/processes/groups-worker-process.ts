/**
 * A worker in a process of its own, for the group-limit tests across
 * processes. Configured by environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA,
 * WORKER_OPTIONS (JSON), HANDLER_DELAY_MS. Its one handler, `work`, records
 * its run in the `runs` table (job id, attempt, the payload's key, start and
 * end on the database clock) and sleeps HANDLER_DELAY_MS between the two.
 * Sends 'ready' over IPC once started.
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
      const key = (job.payload as { key: string }).key;
      const { rows } = await pool.query<{ id: string }>(
        'INSERT INTO runs (job_id, attempts, group_key, started_at) VALUES ($1, $2, $3, clock_timestamp()) RETURNING id',
        [job.id, job.attempts, key],
      );
      if (delayMs > 0) await sleep(delayMs);
      await pool.query('UPDATE runs SET ended_at = clock_timestamp() WHERE id = $1', [rows[0]!.id]);
    },
  },
});
worker.on('error', () => {});
worker.on(STOP, () => {
  void pool.end();
});
await worker.start();
process.send?.('ready');
