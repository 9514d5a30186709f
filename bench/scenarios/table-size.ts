/**
 * Scenario 5, cost against table size (skiplock): drain throughput and the
 * claim statement's latency with 2,000,000 other rows in the jobs table
 * (future-scheduled jobs and kept finished jobs; quick: 200,000), against an
 * empty table, in interleaved runs; and the drain's ratio full / empty.
 */
import pg from 'pg';
import { adminQuery } from '../database.js';
import { quantile } from '../report.js';
import { KINDS } from '../systems/raw-pg.js';
import { loadStatements, skiplockSystem } from '../systems/skiplock.js';
import type { SystemClient, Target } from '../systems/system.js';
import { drainOnce } from './drain.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

const CLAIM_BATCH = 10;

/** Times `claims` claims of `CLAIM_BATCH` jobs (each completed right after); returns their latencies in ms. */
async function claimLatencies(target: Target, claims: number): Promise<number[]> {
  const client = new pg.Client({ connectionString: target.databaseUrl });
  await client.connect();
  try {
    // The statement's own cost, without the WAL flush of its commit (which does not grow with the table).
    await client.query('SET synchronous_commit = off');
    await client.query(
      `INSERT INTO skiplock.jobs (kind, payload) SELECT 'noop', '{}' FROM generate_series(1, $1::int)`,
      [claims * CLAIM_BATCH],
    );
    const { JobQueries } = await loadStatements();
    const queries = new JobQueries('skiplock');
    const latencies: number[] = [];
    for (let k = 0; k < claims; k++) {
      const startedAt = performance.now();
      const claimed = await queries.claim.claim(client, {
        queues: ['default'],
        kinds: KINDS,
        limit: CLAIM_BATCH,
        workerId: 'bench',
        visibilityTimeoutMs: 300_000,
      });
      latencies.push(performance.now() - startedAt);
      const succeeded = claimed.map((j) => ({ ...j, outcome: 'succeeded' as const }));
      await queries.finish.finish(client, succeeded, 'bench', 'delete');
    }
    return latencies;
  } finally {
    await client.end();
  }
}

/** The claim's plan with buffer counts, for the report's notes. */
async function explainClaim(target: Target): Promise<string> {
  const client = new pg.Client({ connectionString: target.databaseUrl });
  await client.connect();
  try {
    await client.query(
      `INSERT INTO skiplock.jobs (kind, payload) SELECT 'noop', '{}' FROM generate_series(1, 100)`,
    );
    const { JobQueries } = await loadStatements();
    const { statement, params } = new JobQueries('skiplock').claim.statementFor({
      queues: ['default'],
      kinds: KINDS,
      limit: CLAIM_BATCH,
      workerId: 'bench',
      visibilityTimeoutMs: 300_000,
    });
    await client.query('BEGIN');
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${statement.text}`,
      params,
    );
    await client.query('ROLLBACK');
    await client.query(`DELETE FROM skiplock.jobs WHERE status = 'queued' AND run_at <= now()`);
    return rows.map((r) => r['QUERY PLAN']).join(' / ');
  } finally {
    await client.end();
  }
}

export const tableSizeScenario: Scenario = {
  id: 5,
  title: 'Cost against table size',
  async run(ctx: BenchContext) {
    // Half future-scheduled, half kept `succeeded`.
    const others = ctx.smoke ? 10_000 : ctx.quick ? 200_000 : 2_000_000;
    const drainJobs = ctx.smoke ? 2_000 : 20_000;
    const claims = ctx.smoke ? 50 : 200;
    const shape = { processes: 1, concurrency: 50 };
    const scenario = '5. Table size';
    const n = (v: number) => v.toLocaleString('en-US');
    const cases = [
      { name: 'empty table', others: 0 },
      {
        name: `${n(others)} other rows (${n(others / 2)} future + ${n(others / 2)} succeeded)`,
        others,
      },
    ];
    const open: { name: string; target: Target; client: SystemClient }[] = [];
    try {
      for (const c of cases) {
        const target = await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', 'size'));
        open.push({ name: c.name, target, client: await skiplockSystem.attach(target) });
        if (c.others > 0) {
          await adminQuery(
            target.databaseUrl,
            `INSERT INTO skiplock.jobs (kind, payload, run_at)
             SELECT 'noop', jsonb_build_object('i', g), now() + interval '1 year' + g * interval '1 second'
             FROM generate_series(1, $1::int) g`,
            [c.others / 2],
          );
          await adminQuery(
            target.databaseUrl,
            `INSERT INTO skiplock.jobs (kind, payload, status, finished_at, attempts)
             SELECT 'noop', jsonb_build_object('i', g), 'succeeded', now(), 1 FROM generate_series(1, $1::int) g`,
            [c.others / 2],
          );
        }
        await adminQuery(target.databaseUrl, 'VACUUM ANALYZE skiplock.jobs');
      }
      // Runs interleave the two tables, so that a disturbance hits both alike.
      for (let run = 0; run < ctx.runs; run++) {
        const rates: number[] = [];
        for (const { name, target, client } of open) {
          const rate = await drainOnce(client, target, drainJobs, shape);
          rates.push(rate);
          ctx.record(
            {
              scenario,
              case: `drain ${n(drainJobs)}, 1 process × ${shape.concurrency}, ${name}`,
              unit: 'jobs/s',
              system: 'skiplock',
            },
            rate,
          );
          const latencies = await claimLatencies(target, claims);
          ctx.record(
            {
              scenario,
              case: `claim of ${CLAIM_BATCH} (bare statement, synchronous_commit off), p50, ${name}`,
              unit: 'ms (lower is better)',
              system: 'skiplock',
            },
            quantile(latencies, 0.5),
          );
          ctx.log(
            `  table size run ${run + 1}: ${name}: ${Math.round(rate)} jobs/s, claim p50 ${quantile(latencies, 0.5).toFixed(2)} ms`,
          );
        }
        ctx.record(
          {
            scenario,
            case: `drain with ${n(others)} other rows / drain on the empty table`,
            unit: 'ratio',
            system: 'skiplock',
            tag: 'size.ratio',
          },
          rates[1]! / rates[0]!,
        );
      }
      for (const { name, target } of open) ctx.note(`claim plan, ${name}: ${await explainClaim(target)}`);
    } finally {
      for (const { target, client } of open) {
        await client.close();
        await skiplockSystem.destroy(target);
      }
    }
  },
};
