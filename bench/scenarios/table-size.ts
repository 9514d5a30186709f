/**
 * Scenario 5, cost against table size (skiplock): drain throughput and the
 * claim statement's latency with many other rows in the jobs table
 * (future-scheduled jobs and kept finished jobs), against an empty table.
 */
import pg from 'pg';
import { adminQuery } from '../database.js';
import { quantile } from '../report.js';
import { CLAIM, COMPLETE } from '../systems/raw-pg.js';
import { skiplockSystem } from '../systems/skiplock.js';
import type { Target } from '../systems/system.js';
import { drainOnce } from './drain.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

const CLAIMS = 200;
const CLAIM_BATCH = 10;

/** Times `CLAIMS` claims of `CLAIM_BATCH` jobs (each completed right after); returns their latencies in ms. */
async function claimLatencies(target: Target): Promise<number[]> {
  const client = new pg.Client({ connectionString: target.databaseUrl });
  await client.connect();
  try {
    // The statement's own cost, without the WAL flush of its commit (which does not grow with the table).
    await client.query('SET synchronous_commit = off');
    await client.query(
      `INSERT INTO skiplock.jobs (kind, payload) SELECT 'noop', '{}' FROM generate_series(1, $1::int)`,
      [CLAIMS * CLAIM_BATCH],
    );
    const latencies: number[] = [];
    for (let k = 0; k < CLAIMS; k++) {
      const startedAt = performance.now();
      const { rows } = await client.query<{ id: string; attempts: number }>({
        name: 'claim',
        text: CLAIM,
        values: ['default', CLAIM_BATCH, 'bench', 300_000],
      });
      latencies.push(performance.now() - startedAt);
      await client.query({
        name: 'complete',
        text: COMPLETE,
        values: [rows.map((r) => r.id), rows.map((r) => r.attempts), 'bench'],
      });
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
    await client.query('BEGIN');
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${CLAIM.replace('$1', "'default'").replace('$2', String(CLAIM_BATCH)).replace('$3', "'bench'").replace('$4', '300000')}`,
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
    const others = ctx.quick ? 100_000 : 1_000_000;
    const drainJobs = 20_000;
    const shape = { processes: 1, concurrency: 50 };
    const scenario = '5. Table size';
    const cases = [
      { name: 'empty table', others: 0 },
      {
        name: `+${others.toLocaleString('en-US')} future + ${others.toLocaleString('en-US')} succeeded rows`,
        others,
      },
    ];
    for (const c of cases) {
      const target = await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', 'size'));
      try {
        if (c.others > 0) {
          await adminQuery(
            target.databaseUrl,
            `INSERT INTO skiplock.jobs (kind, payload, run_at)
             SELECT 'noop', jsonb_build_object('i', g), now() + interval '1 year' + g * interval '1 second'
             FROM generate_series(1, $1::int) g`,
            [c.others],
          );
          await adminQuery(
            target.databaseUrl,
            `INSERT INTO skiplock.jobs (kind, payload, status, finished_at, attempts)
             SELECT 'noop', jsonb_build_object('i', g), 'succeeded', now(), 1 FROM generate_series(1, $1::int) g`,
            [c.others],
          );
        }
        await adminQuery(target.databaseUrl, 'VACUUM ANALYZE skiplock.jobs');
        const client = await skiplockSystem.attach(target);
        try {
          for (let run = 0; run < ctx.runs; run++) {
            const rate = await drainOnce(client, target, drainJobs, shape);
            ctx.record(
              {
                scenario,
                case: `drain ${drainJobs.toLocaleString('en-US')}, 1 process × ${shape.concurrency}, ${c.name}`,
                unit: 'jobs/s',
                system: 'skiplock',
              },
              rate,
            );
            const latencies = await claimLatencies(target);
            ctx.record(
              {
                scenario,
                case: `claim of ${CLAIM_BATCH} (bare statement, synchronous_commit off), p50, ${c.name}`,
                unit: 'ms (lower is better)',
                system: 'skiplock',
              },
              quantile(latencies, 0.5),
            );
            ctx.log(
              `  table size run ${run + 1}: ${c.name}: ${Math.round(rate)} jobs/s, claim p50 ${quantile(latencies, 0.5).toFixed(2)} ms`,
            );
          }
          ctx.note(`claim plan, ${c.name}: ${await explainClaim(target)}`);
        } finally {
          await client.close();
        }
      } finally {
        await skiplockSystem.destroy(target);
      }
    }
  },
};
