/**
 * The demo's small shop: its tables, its orders (planned from a seed), and how
 * an order is placed — the order row and its jobs in ONE transaction.
 */
import type pg from 'pg';
import { quoteIdent } from '../../db/sql.js';
import type { Skiplock } from '../../skiplock.js';
import { seededRandom } from './random.js';

/** A fault the demo injects into one job, so retries, failures and dead letters show. */
export type Fault = 'none' | 'transient-once' | 'permanent' | 'always';

/** The payload of every shop job. The latency and fault are planned, so a seed replays the same run. */
export interface ShopPayload {
  orderId: string;
  /** How long the handler works, in milliseconds. */
  latencyMs: number;
  fault: Fault;
}

/** The shop's kinds and payloads. */
export type ShopJobs = {
  send_invoice_email: ShopPayload;
  resize_image: ShopPayload;
  sync_inventory: ShopPayload;
};

/** The kinds every order enqueues. */
export const SHOP_KINDS = ['send_invoice_email', 'resize_image', 'sync_inventory'] as const;

/** The two queues: `critical` (emails, inventory) and `bulk` (images). */
export const SHOP_QUEUES = ['critical', 'bulk'] as const;

/** Every shop job gets at most this many attempts: a fault `always` reaches the dead letter fast. */
export const SHOP_MAX_ATTEMPTS = 3;

/** One planned job of an order. */
export interface PlannedJob {
  kind: (typeof SHOP_KINDS)[number];
  queue: (typeof SHOP_QUEUES)[number];
  priority: number;
  delayMs: number;
  latencyMs: number;
  fault: Fault;
}

/** One planned order. */
export interface PlannedOrder {
  customer: string;
  totalCents: number;
  /** The payment is declined inside the transaction: the order and its jobs roll back. */
  rollBack: boolean;
  jobs: PlannedJob[];
}

/** Plans `count` orders from `seed`: about 10% roll back; about 15% of jobs get a fault. */
export function planOrders(count: number, seed: number): PlannedOrder[] {
  const random = seededRandom(seed);
  const between = (min: number, max: number) => Math.round(min + random() * (max - min));
  const fault = (): Fault => {
    const r = random();
    if (r < 0.12) return 'transient-once';
    if (r < 0.135) return 'permanent';
    if (r < 0.15) return 'always';
    return 'none';
  };
  return Array.from({ length: count }, (_, i) => ({
    customer: `customer-${1 + Math.floor(random() * 50)}`,
    totalCents: between(500, 25_000),
    rollBack: random() < 0.1 && i > 0,
    jobs: [
      {
        kind: 'send_invoice_email',
        queue: 'critical',
        priority: 10,
        delayMs: 0,
        latencyMs: between(20, 80),
        fault: fault(),
      },
      {
        kind: 'sync_inventory',
        queue: 'critical',
        priority: 5,
        // Inventory is synced in a later batch for some orders: a scheduled job.
        delayMs: random() < 0.3 ? between(500, 2500) : 0,
        latencyMs: between(10, 40),
        fault: fault(),
      },
      {
        kind: 'resize_image',
        queue: 'bulk',
        priority: random() < 0.2 ? 1 : 0,
        delayMs: 0,
        latencyMs: between(60, 200),
        fault: fault(),
      },
    ],
  }));
}

/** Creates the shop tables in `schema` (the demo run's own schema). */
export async function createShopTables(pool: pg.Pool, schema: string): Promise<void> {
  const s = quoteIdent(schema);
  await pool.query(`
    CREATE TABLE ${s}.orders (
      id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      customer    text NOT NULL,
      total_cents int  NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now()
    );
    -- The effect of a job, written once per (order, kind) whatever the number of deliveries.
    CREATE TABLE ${s}.effects (
      order_id   bigint NOT NULL,
      kind       text   NOT NULL,
      job_id     bigint NOT NULL,
      attempt    int    NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (order_id, kind)
    );
    -- Deliveries that found their effect already applied (at-least-once delivery, absorbed):
    -- the row each would have written, applied_at being when it came.
    CREATE TABLE ${s}.duplicate_deliveries (LIKE ${s}.effects INCLUDING DEFAULTS);
    -- Every handler start, on the database clock, for the latency figures.
    CREATE TABLE ${s}.handler_runs (
      job_id     bigint NOT NULL,
      kind       text   NOT NULL,
      attempt    int    NOT NULL,
      run_at     timestamptz NOT NULL,
      started_at timestamptz NOT NULL DEFAULT now()
    );
  `);
}

/**
 * Places one order: inserts the order and enqueues its jobs in one transaction,
 * then commits — or rolls back when the plan says the payment is declined, so
 * neither the order nor its jobs exist.
 *
 * @returns the order id (also for a rolled-back order: its id was taken, then discarded).
 */
export async function placeOrder(
  pool: pg.Pool,
  skiplock: Skiplock<ShopJobs>,
  schema: string,
  order: PlannedOrder,
): Promise<string> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO ${quoteIdent(schema)}.orders (customer, total_cents) VALUES ($1, $2) RETURNING id`,
      [order.customer, order.totalCents],
    );
    const orderId = rows[0]!.id;
    await skiplock.enqueueMany(
      order.jobs.map((job) => ({
        kind: job.kind,
        payload: { orderId, latencyMs: job.latencyMs, fault: job.fault },
        queue: job.queue,
        priority: job.priority,
        delayMs: job.delayMs,
        maxAttempts: SHOP_MAX_ATTEMPTS,
      })),
      { client },
    );
    await client.query(order.rollBack ? 'ROLLBACK' : 'COMMIT');
    return orderId;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
