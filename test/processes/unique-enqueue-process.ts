/**
 * A producer in a process of its own, for the unique-key race: on the message
 * 'go' it sends N concurrent `enqueue` calls of one unique key and replies
 * with what each returned ({ id, duplicate }), then exits. Configured by
 * environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA, UNIQUE_KEY, ENQUEUES.
 */
import pg from 'pg';
import { Skiplock } from '../../src/index.js';

const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 10 });
pool.on('error', () => {});
const skiplock = new Skiplock({ pool, schema: process.env.SKIPLOCK_SCHEMA ?? 'skiplock' });
const key = process.env.UNIQUE_KEY ?? 'race';
const count = Number(process.env.ENQUEUES ?? 200);

// Open the pool's connections before the start signal, so the calls race.
await Promise.all(Array.from({ length: 10 }, () => pool.query('SELECT 1')));
process.send?.('ready');
process.once('message', async () => {
  const results = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      skiplock.enqueue('race', { pid: process.pid, i }, { uniqueKey: key }).then(
        (job) => ({ id: job.id, duplicate: job.duplicate }),
        (error: unknown) => ({ error: String(error) }),
      ),
    ),
  );
  process.send?.(results, () => {
    void skiplock.close().then(() => pool.end());
  });
});
