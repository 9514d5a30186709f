/**
 * A missing optional package fails the feature that needs it with one error
 * class, MissingDependencyError, naming the package and its install command.
 * (Tracing's own case is in tracing.test.ts; the command line's in test/cli.)
 */
import { describe, expect, it } from 'vitest';
import { missing, reportWithout } from './support/missing-packages.js';

describe('without the optional packages installed', () => {
  it('metrics and the Kysely and Drizzle adapters fail with a MissingDependencyError naming the package', async () => {
    const report = await reportWithout('processes/without-optional-packages.ts', [
      'prom-client',
      'kysely',
      'drizzle-orm',
    ]);
    expect(report).toEqual({
      metrics: missing('prom-client', 'skiplock metrics'),
      kysely: missing('kysely', 'skiplock/kysely'),
      drizzle: missing('drizzle-orm', 'skiplock/drizzle'),
    });
  });
});
