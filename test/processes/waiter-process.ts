/**
 * A process that waits for jobs (JOB_IDS, comma-separated) with waitFor and
 * sends the parent `{ id, outcome }` or `{ id, error: { name, message } }` for
 * each, then exits. Sends 'ready' before it starts waiting.
 */
import { databaseFromEnv } from '../support/worker-from-env.js';

const { pool, skiplock } = databaseFromEnv();
const ids = (process.env.JOB_IDS ?? '').split(',').filter(Boolean);
process.send?.('ready');
await Promise.all(
  ids.map(async (id) => {
    try {
      const outcome = await skiplock.waitFor(id, { timeoutMs: 60_000 });
      process.send?.({ id, outcome });
    } catch (error) {
      const e = error as Error;
      process.send?.({ id, error: { name: e.name, message: e.message } });
    }
  }),
);
await skiplock.close();
await pool.end();
process.disconnect?.();
