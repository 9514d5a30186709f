import { describe, expect, it } from 'vitest';
import { countRows, quoteIdent } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';
import { runCli } from './cli-process.js';

const t = useTestDatabase({ migrate: false });

/**
 * One demo run (schema kept for inspection) and its JSON summary; with `kill`,
 * one worker is SIGKILLed midway and a replacement forked, as the demo does by
 * default.
 */
async function demo(seed: number, kill = false) {
  const run = await runCli(
    [
      'demo',
      '--orders',
      '30',
      '--workers',
      '2',
      '--seed',
      String(seed),
      ...(kill ? [] : ['--no-kill']),
      '--json',
      '--keep',
      '--database-url',
      t.db.url,
    ],
    { timeoutMs: 90_000 },
  );
  expect(run.code, run.stderr).toBe(0);
  const summary = JSON.parse(run.stdout);
  t.defer(() => t.query(`DROP SCHEMA IF EXISTS ${quoteIdent(summary.schema)} CASCADE`));
  return summary;
}

/**
 * What a seed decides, read back from the database: each committed order
 * (customer, total) with its jobs' kind, queue, priority, latency and fault,
 * and what each job became (a fault decides it; retries change only the
 * number of attempts and run_at). Order ids are left out: four producers take
 * them in whatever order they commit.
 */
async function seeded(schema: string) {
  const s = quoteIdent(schema);
  return t.query(
    `SELECT o.customer, o.total_cents, j.kind, j.queue, j.priority, j.max_attempts,
            j.payload->'latencyMs' AS latency_ms, j.payload->>'fault' AS fault, j.status
     FROM ${s}.jobs j JOIN ${s}.orders o ON o.id = (j.payload->>'orderId')::bigint
     ORDER BY 1, 2, 3`,
  );
}

describe('skiplock demo', () => {
  it('plays the shop with small numbers, and its JSON summary matches the database', async () => {
    const summary = await demo(7, true);
    expect(summary.proof.holds).toBe(true);
    expect(summary.proof.checks.every((c: { ok: boolean }) => c.ok)).toBe(true);
    const s = quoteIdent(summary.schema);
    const orders = await countRows(t.db.pool, `${s}.orders`);
    expect(summary.orders.committed).toBe(orders);
    expect(summary.orders.placed).toBe(30);
    expect(summary.orders.committed + summary.orders.rolledBack).toBe(30);
    const [jobs] = await t.query(
      `SELECT count(*)::int AS committed,
              count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
              count(*) FILTER (WHERE status = 'failed')::int AS failed,
              count(*) FILTER (WHERE status = 'dead')::int AS dead,
              count(*) FILTER (WHERE attempts > 1)::int AS retried
       FROM ${s}.jobs`,
    );
    expect(summary.jobs).toMatchObject(jobs!);
    expect(jobs!.committed).toBe(orders * 3);
    expect(await countRows(t.db.pool, `${s}.effects`)).toBe(summary.jobs.succeeded);
    expect(await countRows(t.db.pool, `${s}.duplicate_deliveries`)).toBe(summary.jobs.duplicateDeliveries);
    expect(summary.latencyMs.p50).toBeLessThanOrEqual(summary.latencyMs.p99);
    expect(summary.throughputPerSecond).toBeGreaterThan(0);
  }, 120_000);

  it('is reproducible with a seed: the same orders, jobs, faults and outcomes', async () => {
    const first = await demo(11);
    const second = await demo(11);
    expect(second.schema).not.toBe(first.schema);
    const plan = await seeded(first.schema);
    expect(plan).toHaveLength(first.jobs.committed);
    expect(await seeded(second.schema)).toEqual(plan);
    const outcome = (s: typeof first) => ({
      orders: s.orders,
      committed: s.jobs.committed,
      succeeded: s.jobs.succeeded,
      failed: s.jobs.failed,
      dead: s.jobs.dead,
      byQueue: s.jobs.byQueue,
    });
    expect(outcome(second)).toEqual(outcome(first));
    // The seed plans faults of every kind, so the outcomes compared are not all alike.
    expect(new Set(plan.map((j) => j.fault)).size).toBeGreaterThan(1);
  }, 200_000);
});
