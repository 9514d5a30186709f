/**
 * Migrates SKIPLOCK_URL in schema SKIPLOCK_SCHEMA once the parent says 'go'
 * (after every process said 'ready'), and exits 0, or 1 on error.
 */
import { once } from 'node:events';
import { Skiplock } from '../../src/index.js';

const skiplock = new Skiplock({
  connectionString: process.env.SKIPLOCK_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
try {
  await skiplock.pool.query('SELECT 1');
  process.send?.('ready');
  await once(process, 'message');
  await skiplock.migrate();
  await skiplock.close();
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
