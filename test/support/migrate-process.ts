/** Migrates SKIPLOCK_URL in schema SKIPLOCK_SCHEMA and exits 0, or 1 on error. */
import { Skiplock } from '../../src/index.js';

const skiplock = new Skiplock({
  connectionString: process.env.SKIPLOCK_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
try {
  await skiplock.migrate();
  await skiplock.close();
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
