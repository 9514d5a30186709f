/**
 * A worker with one transactional handler, in a process of its own, for the
 * SIGKILL-between-insert-and-COMMIT test. Configured by environment:
 * SKIPLOCK_URL, SKIPLOCK_SCHEMA, WORKER_OPTIONS (JSON). Kind `txn` inserts
 * (job_id, attempts, pid) into `txn_effects` of the schema on its transaction's
 * client; a job with `payload.park` then sends 'inserted' over IPC and waits
 * forever (for the parent's SIGKILL) instead of returning. Sends 'ready' once
 * started.
 */
import type { TransactionalHandlerContext } from '../../src/index.js';
import { tableIn } from '../support/sql.js';
import { databaseFromEnv, startWorkerFromEnv } from '../support/worker-from-env.js';

const db = databaseFromEnv<{ txn: { park?: boolean } }>();
const effects = tableIn(db.schema, 'txn_effects');

await startWorkerFromEnv(db, {
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
});
