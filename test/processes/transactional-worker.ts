/**
 * A worker with one transactional handler, in a process of its own, for the
 * SIGKILL-between-insert-and-COMMIT test. Configured by environment:
 * SKIPLOCK_URL, SKIPLOCK_SCHEMA, WORKER_OPTIONS (JSON). Kind `txn` inserts
 * (job_id, attempts, pid) into `txn_effects` of the schema on its transaction's
 * client; a job with `payload.park` then sends 'inserted' over IPC and waits
 * forever (for the parent's SIGKILL) instead of returning. Sends 'ready' once
 * started.
 */
import pg from 'pg';
import { Skiplock, type TransactionalHandlerContext } from '../../src/index.js';
import { tableIn } from '../support/sql.js';

const schema = process.env.SKIPLOCK_SCHEMA ?? 'skiplock';
const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
pool.on('error', () => {});
const skiplock = new Skiplock<{ txn: { park?: boolean } }>({ pool, schema });
const effects = tableIn(schema, 'txn_effects');

const worker = skiplock.worker({
  handleSignals: true,
  ...JSON.parse(process.env.WORKER_OPTIONS ?? '{}'),
  handlers: {
    txn: {
      transactional: true,
      handle: async (job, { client }: TransactionalHandlerContext) => {
        await client.query(`INSERT INTO ${effects} (job_id, attempts, pid) VALUES ($1, $2, $3)`, [
          job.id,
          job.attempts,
          process.pid,
        ]);
        if (job.payload.park) {
          process.send?.('inserted');
          await new Promise(() => {});
        }
      },
    },
  },
});
worker.on('error', () => {});
await worker.start();
process.send?.('ready');
