/**
 * A producer in a process of its own, for overlapping batches with unique
 * keys: on the message 'go' it sends BATCHES `enqueueMany` calls one after
 * another, each of BATCH_SIZE items over keys `key-0` … `key-(KEYS-1)` picked
 * at random, with 'skip' and 'replace' mixed; every other batch runs in a
 * transaction of its own connection (the caller's transaction), the others on
 * skiplock's pool. Replies with what each batch returned or the error it
 * threw, then exits. Configured by environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA,
 * BATCHES, BATCH_SIZE, KEYS.
 */
import pg from 'pg';
import { DatabaseError, Skiplock } from '../../src/index.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 2 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const batches = Number(process.env.BATCHES ?? 50);
const size = Number(process.env.BATCH_SIZE ?? 10);
const keys = Number(process.env.KEYS ?? 20);

/** One item as sent and what came back for it. */
export interface BatchItemResult {
  key: string;
  onConflict: 'skip' | 'replace';
  id: string;
  duplicate: boolean;
  payload: unknown;
}

/** One batch's outcome: its items, or the error it threw. */
export type BatchResult = { items: BatchItemResult[] } | { error: string; sqlState?: string | undefined };

async function sendBatch(b: number, caller: pg.PoolClient | undefined): Promise<BatchResult> {
  const items = Array.from({ length: size }, (_, i) => ({
    kind: 'batch',
    payload: { key: '', pid: process.pid, b, i },
    uniqueKey: `key-${Math.floor(Math.random() * keys)}`,
    onConflict: Math.random() < 0.5 ? ('skip' as const) : ('replace' as const),
  }));
  for (const item of items) item.payload.key = item.uniqueKey;
  try {
    if (caller) await caller.query('BEGIN');
    const jobs = await skiplock.enqueueMany(items, caller ? { client: caller } : {});
    if (caller) await caller.query('COMMIT');
    return {
      items: jobs.map((job, i) => ({
        key: items[i]!.uniqueKey,
        onConflict: items[i]!.onConflict,
        id: job.id,
        duplicate: job.duplicate,
        payload: job.payload,
      })),
    };
  } catch (error) {
    if (caller) await caller.query('ROLLBACK').catch(() => {});
    return { error: String(error), sqlState: error instanceof DatabaseError ? error.sqlState : undefined };
  }
}

await pool.query('SELECT 1');
const caller = await pool.connect();
process.send?.('ready');
process.once('message', async () => {
  const results: BatchResult[] = [];
  for (let b = 0; b < batches; b++) results.push(await sendBatch(b, b % 2 === 0 ? caller : undefined));
  caller.release();
  process.send?.(results, () => {
    void skiplock.close().then(() => pool.end());
  });
});
