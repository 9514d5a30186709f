/**
 * skiplock in a process where the optional packages named in SKIPLOCK_TEST_HIDE
 * cannot be found (test/support/hide-packages.mjs, given with `--import`):
 * reports how each feature that needs one fails, and exits.
 */
import { failureReport as failure } from '../support/missing-packages.js';

const { Skiplock } = await import('../../src/index.js');
const { createMetrics } = await import('../../src/telemetry/metrics.js');
const skiplock = new Skiplock({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
const report: Record<string, unknown> = {
  metrics: await createMetrics(skiplock).then(() => 'loaded', failure),
  kysely: await import('../../src/adapters/kysely.js').then(() => 'loaded', failure),
  drizzle: await import('../../src/adapters/drizzle.js').then(() => 'loaded', failure),
};
await skiplock.close();
process.send?.(report, () => process.exit(0));
