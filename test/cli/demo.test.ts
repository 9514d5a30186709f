import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { runCli } from './cli-process.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase(false);
});
afterAll(async () => {
  await db?.close();
});

describe('skiplock demo', () => {
  it('plays the shop with small numbers, and its JSON summary matches the database', async () => {
    const run = await runCli([
      'demo',
      '--orders',
      '30',
      '--workers',
      '2',
      '--seed',
      '7',
      '--json',
      '--keep',
      '--database-url',
      db.url,
    ]);
    expect(run.code, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout);
    expect(summary.proof.holds).toBe(true);
    expect(summary.proof.checks.every((c: { ok: boolean }) => c.ok)).toBe(true);
    const s = `"${summary.schema}"`;
    const [orders] = await db.query(`SELECT count(*)::int AS n FROM ${s}.orders`);
    expect(summary.orders.committed).toBe(orders!.n);
    expect(summary.orders.placed).toBe(30);
    expect(summary.orders.committed + summary.orders.rolledBack).toBe(30);
    const [jobs] = await db.query(
      `SELECT count(*)::int AS committed,
              count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
              count(*) FILTER (WHERE status = 'failed')::int AS failed,
              count(*) FILTER (WHERE status = 'dead')::int AS dead,
              count(*) FILTER (WHERE attempts > 1)::int AS retried
       FROM ${s}.jobs`,
    );
    expect(summary.jobs).toMatchObject(jobs!);
    expect(jobs!.committed).toBe(orders!.n * 3);
    const [effects] = await db.query(`SELECT count(*)::int AS n FROM ${s}.effects`);
    expect(effects!.n).toBe(summary.jobs.succeeded);
    const [duplicates] = await db.query(`SELECT count(*)::int AS n FROM ${s}.duplicate_deliveries`);
    expect(duplicates!.n).toBe(summary.jobs.duplicateDeliveries);
    expect(summary.latencyMs.p50).toBeLessThanOrEqual(summary.latencyMs.p99);
    expect(summary.throughputPerSecond).toBeGreaterThan(0);
    // Same seed, same shop: the plan (faults, rollbacks) is reproducible.
    const planned = await db.query(
      `SELECT payload->>'fault' AS fault, count(*)::int AS n FROM ${s}.jobs GROUP BY 1 ORDER BY 1`,
    );
    expect(planned.length).toBeGreaterThan(0);
    await db.query(`DROP SCHEMA ${s} CASCADE`);
  }, 120_000);
});
