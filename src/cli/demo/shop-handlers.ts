/**
 * The demo's handlers file, loaded by `skiplock worker --handlers` in each demo
 * worker process. Each handler records its start, works for the planned
 * latency, fails as planned, and writes its effect idempotently: one row per
 * (order, kind), a repeated delivery is counted and changes nothing.
 *
 * Reads `DATABASE_URL` and `SKIPLOCK_DEMO_SCHEMA` from the environment.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { quoteIdent } from '../../db/sql.js';
import { PermanentError } from '../../errors.js';
import type { Job } from '../../job/job.js';
import type { HandlerContext } from '../../worker/handler-definition.js';
import type { ShopPayload } from './shop.js';

const schema = process.env.SKIPLOCK_DEMO_SCHEMA;
if (!schema) throw new Error('SKIPLOCK_DEMO_SCHEMA is not set: this file is the handlers of `skiplock demo`');
const s = quoteIdent(schema);
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: 20,
  idleTimeoutMillis: 0,
  application_name: 'skiplock-demo',
});
pool.on('error', () => {});
// Open the connections before the worker starts, so a job's latency is not a connection's set-up.
const warm = await Promise.all(
  Array.from({ length: Number(process.env.SKIPLOCK_DEMO_CONCURRENCY ?? 16) }, () => pool.connect()),
);
for (const client of warm) client.release();

async function perform(job: Job<string, ShopPayload>, { signal }: HandlerContext): Promise<void> {
  const { orderId, latencyMs, fault } = job.payload;
  await pool.query(`INSERT INTO ${s}.handler_runs (job_id, kind, attempt, run_at) VALUES ($1, $2, $3, $4)`, [
    job.id,
    job.kind,
    job.attempts,
    job.runAt,
  ]);
  await sleep(latencyMs, undefined, { signal });
  if (fault === 'permanent') throw new PermanentError(`order ${orderId}: the customer's address is invalid`);
  if (fault === 'always') throw new Error(`order ${orderId}: the partner API keeps answering 503`);
  if (fault === 'transient-once' && job.attempts === 1) throw new Error(`order ${orderId}: connection reset`);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const applied = await client.query(
      `INSERT INTO ${s}.effects (order_id, kind, job_id, attempt) VALUES ($1, $2, $3, $4)
       ON CONFLICT (order_id, kind) DO NOTHING`,
      [orderId, job.kind, job.id, job.attempts],
    );
    if (applied.rowCount === 0) {
      await client.query(
        `INSERT INTO ${s}.duplicate_deliveries (order_id, kind, job_id, attempt) VALUES ($1, $2, $3, $4)`,
        [orderId, job.kind, job.id, job.attempts],
      );
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

export default {
  send_invoice_email: perform,
  resize_image: perform,
  sync_inventory: perform,
};
