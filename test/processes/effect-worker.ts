/**
 * A broker-side worker process whose handler is idempotent: for each delivery
 * it records the delivery and writes the job's effect keyed by the job's id
 * (ON CONFLICT DO NOTHING), in one statement. Tells its parent `ready` once it
 * consumes; stops gracefully on SIGTERM (then exits by it). With KILL_AFTER_EFFECTS=k it SIGKILLs
 * itself right after its k-th delivery, before the delivery is acknowledged,
 * so the broker delivers that job again.
 * Env: DATABASE_URL, SKIPLOCK_SCHEMA, BROKER_QUEUE, EFFECTS_TABLE and
 * DELIVERIES_TABLE (quoted), and NATS_URL + NATS_STREAM or AMQP_URL + AMQP_QUEUE.
 */
import { type Job, Skiplock } from '../../src/index.js';
import { workerFromEnv } from './broker-from-env.js';

const skiplock = new Skiplock({
  connectionString: process.env.DATABASE_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
const killAfter = Number(process.env.KILL_AFTER_EFFECTS ?? 0);
const record = `WITH delivery AS (INSERT INTO ${process.env.DELIVERIES_TABLE!} (job_id, pid) VALUES ($1, $2))
  INSERT INTO ${process.env.EFFECTS_TABLE!} (job_id) VALUES ($1) ON CONFLICT DO NOTHING`;
let deliveries = 0;
const worker = workerFromEnv(skiplock, {
  queues: [process.env.BROKER_QUEUE!],
  concurrency: 4,
  handlers: {
    effect: async (job: Job) => {
      await skiplock.pool.query(record, [job.id, process.pid]);
      if (++deliveries === killAfter) process.kill(process.pid, 'SIGKILL');
    },
  },
});
worker.on('error', () => {});
await worker.start();
process.send?.('ready');
