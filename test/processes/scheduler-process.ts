/**
 * A worker that only schedules, in a process of its own: no handlers, so it
 * claims nothing and the jobs its scheduler enqueues stay for the test to
 * count. Configured by SKIPLOCK_URL and SKIPLOCK_SCHEMA. Sends 'ready' over
 * IPC once started, then `{ now }` (its wall clock); stops gracefully on SIGTERM.
 */
import pg from 'pg';
import { Skiplock } from '../../src/index.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const worker = skiplock.worker({ handlers: {}, maintenanceOnly: true, handleSignals: true });
worker.on('error', (error, source) =>
  process.stderr.write(`scheduler process ${source}: ${error.message}\n`),
);
worker.on('worker:stop', () => {
  void pool.end();
});
await worker.start();
process.send?.('ready');
// What this process takes for now, so a test can see a clock set ahead.
process.send?.({ now: Date.now() });
