/**
 * The demo's summary and its proof, both read from the database: what the jobs
 * became, how fast, and whether every committed order got its effects exactly
 * once and every rolled-back order none.
 */
import type pg from 'pg';
import { quoteIdent } from '../../db/sql.js';
import { SHOP_KINDS } from './shop.js';

/** One check of the proof. */
export interface ProofCheck {
  name: string;
  ok: boolean;
  /** The offending count (0 when ok). */
  found: number;
}

/** What the demo reports (also its `--json` output). */
export interface DemoSummary {
  schema: string;
  seed: number;
  orders: { placed: number; committed: number; rolledBack: number };
  workers: {
    processes: number;
    concurrency: number;
    killed: { workerId: string; runningJobs: number } | null;
    visibilityTimeoutMs: number;
  };
  jobs: {
    committed: number;
    succeeded: number;
    failed: number;
    dead: number;
    unfinished: number;
    retried: number;
    attempts: number;
    duplicateDeliveries: number;
    byQueue: Record<string, number>;
  };
  elapsedMs: number;
  throughputPerSecond: number;
  /** Handler start minus run_at (for an immediate job, its enqueue time), first attempts, database clock. */
  latencyMs: { p50: number; p95: number; p99: number };
  proof: { holds: boolean; checks: ProofCheck[] };
}

/** Reads the summary's figures and runs the proof's checks. */
export async function summarize(
  pool: pg.Pool,
  run: {
    schema: string;
    seed: number;
    placed: number;
    rolledBackIds: string[];
    processes: number;
    concurrency: number;
    killed: DemoSummary['workers']['killed'];
    visibilityTimeoutMs: number;
  },
): Promise<DemoSummary> {
  const s = quoteIdent(run.schema);
  const one = async (text: string, values: unknown[] = []) =>
    (await pool.query<Record<string, number>>(text, values)).rows[0]!;
  const jobs = await one(`
    SELECT count(*)::int AS committed,
           count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
           count(*) FILTER (WHERE status = 'failed')::int AS failed,
           count(*) FILTER (WHERE status = 'dead')::int AS dead,
           count(*) FILTER (WHERE status IN ('queued', 'running'))::int AS unfinished,
           count(*) FILTER (WHERE attempts > 1)::int AS retried,
           coalesce(sum(attempts), 0)::int AS attempts,
           coalesce(EXTRACT(EPOCH FROM max(finished_at) - min(created_at)) * 1000, 0)::float8 AS elapsed_ms
    FROM ${s}.jobs`);
  const byQueue = await pool.query<{ queue: string; n: number }>(
    `SELECT queue, count(*)::int AS n FROM ${s}.jobs GROUP BY queue ORDER BY queue`,
  );
  const orders = await one(`SELECT count(*)::int AS n FROM ${s}.orders`);
  const duplicates = await one(`SELECT count(*)::int AS n FROM ${s}.duplicate_deliveries`);
  const latency = await one(`
    SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0)::float8 AS p50,
           coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), 0)::float8 AS p95,
           coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0)::float8 AS p99
    FROM (SELECT EXTRACT(EPOCH FROM started_at - run_at) * 1000 AS ms FROM ${s}.handler_runs WHERE attempt = 1) r`);
  const checks = await proof(pool, s, run.rolledBackIds);
  const elapsedMs = Number(jobs.elapsed_ms);
  const finished = jobs.succeeded! + jobs.failed! + jobs.dead!;
  return {
    schema: run.schema,
    seed: run.seed,
    orders: { placed: run.placed, committed: orders.n!, rolledBack: run.rolledBackIds.length },
    workers: {
      processes: run.processes,
      concurrency: run.concurrency,
      killed: run.killed,
      visibilityTimeoutMs: run.visibilityTimeoutMs,
    },
    jobs: {
      committed: jobs.committed!,
      succeeded: jobs.succeeded!,
      failed: jobs.failed!,
      dead: jobs.dead!,
      unfinished: jobs.unfinished!,
      retried: jobs.retried!,
      attempts: jobs.attempts!,
      duplicateDeliveries: duplicates.n!,
      byQueue: Object.fromEntries(byQueue.rows.map((r) => [r.queue, r.n])),
    },
    elapsedMs: Math.round(elapsedMs),
    throughputPerSecond: elapsedMs > 0 ? Math.round((finished / elapsedMs) * 10_000) / 10 : 0,
    latencyMs: {
      p50: Math.round(latency.p50!),
      p95: Math.round(latency.p95!),
      p99: Math.round(latency.p99!),
    },
    proof: { holds: checks.every((c) => c.ok), checks },
  };
}

async function proof(pool: pg.Pool, s: string, rolledBackIds: string[]): Promise<ProofCheck[]> {
  const count = async (name: string, text: string, values: unknown[] = []): Promise<ProofCheck> => {
    const found = (await pool.query<{ n: number }>(text, values)).rows[0]!.n;
    return { name, ok: found === 0, found };
  };
  const jobOrder = `(j.payload->>'orderId')::bigint`;
  return [
    await count(
      'every committed order has its three jobs',
      `SELECT count(*)::int AS n FROM ${s}.orders o CROSS JOIN unnest($1::text[]) AS k(kind)
       WHERE NOT EXISTS (SELECT 1 FROM ${s}.jobs j WHERE j.kind = k.kind AND ${jobOrder} = o.id)`,
      [SHOP_KINDS],
    ),
    await count(
      'no job is left queued or running',
      `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status IN ('queued', 'running')`,
    ),
    await count(
      'every succeeded job applied its effect exactly once',
      `SELECT count(*)::int AS n FROM ${s}.jobs j WHERE j.status = 'succeeded'
         AND (SELECT count(*) FROM ${s}.effects e WHERE e.order_id = ${jobOrder} AND e.kind = j.kind) <> 1`,
    ),
    await count(
      'no effect without a succeeded job of a committed order',
      `SELECT count(*)::int AS n FROM ${s}.effects e
       WHERE NOT EXISTS (SELECT 1 FROM ${s}.orders o WHERE o.id = e.order_id)
          OR NOT EXISTS (SELECT 1 FROM ${s}.jobs j
                         WHERE ${jobOrder} = e.order_id AND j.kind = e.kind AND j.status = 'succeeded')`,
    ),
    await count(
      'every job ended as planned (permanent fault → failed, always failing → dead, else succeeded)',
      `SELECT count(*)::int AS n FROM ${s}.jobs j
       WHERE j.status <> CASE j.payload->>'fault' WHEN 'permanent' THEN 'failed' WHEN 'always' THEN 'dead'
                                                  ELSE 'succeeded' END`,
    ),
    await count(
      'rolled-back orders left no order, no job and no effect',
      `SELECT ((SELECT count(*) FROM ${s}.orders WHERE id = ANY($1::bigint[]))
             + (SELECT count(*) FROM ${s}.jobs j WHERE ${jobOrder} = ANY($1::bigint[]))
             + (SELECT count(*) FROM ${s}.effects WHERE order_id = ANY($1::bigint[])))::int AS n`,
      [rolledBackIds],
    ),
  ];
}
