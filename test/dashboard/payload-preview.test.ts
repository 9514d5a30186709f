/**
 * The jobs list reads a bounded preview of each payload, never whole payloads:
 * its page costs the same whatever their size.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../../src/dashboard/index.js';
import { Skiplock } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';

const t = useTestDatabase();
let pool: pg.Pool;
/** The largest row, in characters of JSON, that any statement on `pool` returned. */
let largestRowChars = 0;

beforeAll(() => {
  pool = new pg.Pool({ connectionString: t.db.url, max: 4 });
  // A pool's owner hears its idle clients' errors (the file's database is dropped with FORCE at the end).
  pool.on('error', () => {});
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<pg.QueryResult>;
  (pool as unknown as { query: typeof query }).query = async (...args) => {
    const result = await query(...args);
    for (const row of result.rows ?? [])
      largestRowChars = Math.max(largestRowChars, JSON.stringify(row).length);
    return result;
  };
});
afterAll(async () => {
  await pool?.end();
});

describe('the dashboard jobs list', () => {
  it('lists a job with a 4 MB payload without reading the payload', async () => {
    const roomy = new Skiplock({ pool: t.db.pool, schema: t.schema, maxPayloadBytes: 2 ** 28 });
    const job = await roomy.enqueue('big_payload', { blob: 'p'.repeat(4_000_000) });
    await roomy.close();
    const skiplock = new Skiplock({ pool, schema: t.schema });
    try {
      const app = createDashboard(skiplock, { metrics: false, refreshIntervalMs: 0 });
      largestRowChars = 0;
      const response = await app.fetch(new Request('http://127.0.0.1/jobs'));
      expect(response.status).toBe(200);
      const page = await response.text();
      expect(page).toContain(`/jobs/${job.id}`);
      expect(page.length).toBeLessThan(200_000);
      expect(largestRowChars).toBeGreaterThan(0);
      expect(largestRowChars).toBeLessThan(10_000);
    } finally {
      await skiplock.close();
    }
  });
});
