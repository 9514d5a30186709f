/**
 * Scenario 6, held snapshot: the steady state of scenario 4 while another
 * session of the same database holds a REPEATABLE READ snapshot open, so that
 * no row deleted or updated after it can be vacuumed or its index entries
 * killed. Also a 20,000-job drain with and without such a snapshot, which
 * shows what the claim pays to skip what it cannot clean up.
 */
import pg from 'pg';
import { quantile } from '../report.js';
import type { Target } from '../systems/system.js';
import { drainOnce } from './drain.js';
import { type BenchContext, namespaceFor, type Scenario, sleep } from './scenario.js';
import {
  latenciesIn,
  rateIn,
  STEADY_CONCURRENCY,
  STEADY_RATE,
  steadyDurationMs,
  steadyRun,
} from './steady-state.js';

/** A session on the target's database holding a REPEATABLE READ snapshot until `release()`. */
async function holdSnapshot(target: Target): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: target.databaseUrl });
  await client.connect();
  await client.query('SET idle_in_transaction_session_timeout = 0');
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  // The snapshot is taken by the transaction's first statement.
  await client.query('SELECT 1');
  return {
    async release() {
      await client.query('COMMIT');
      await client.end();
    },
  };
}

export const heldSnapshotScenario: Scenario = {
  id: 6,
  title: 'Held snapshot',
  async run(ctx: BenchContext) {
    const durationMs = steadyDurationMs(ctx);
    const holdMs = ctx.quick ? durationMs / 2 : 30_000;
    const holdFromMs = (durationMs - holdMs) / 2;
    const scenario = '6. Held snapshot';
    const label = `steady ${STEADY_RATE} jobs/s, ${durationMs / 1000} s, snapshot held ${holdMs / 1000} s from ${holdFromMs / 1000} s`;
    const drainJobs = ctx.smoke ? 2_000 : 20_000;
    for (const system of ctx.systems) {
      if (!system.postgres) {
        ctx.note(`held snapshot: ${system.name} skipped (not stored in PostgreSQL)`);
        continue;
      }
      const target = await system.create(ctx.serverUrl, namespaceFor(system.name, 'snapshot'));
      try {
        for (let run = 0; run < ctx.runs; run++) {
          const producer = await system.attach(target);
          const consumer = await system.attach(target);
          const rec = (kase: string, unit: string, value: number) =>
            ctx.record({ scenario, case: kase, unit, system: system.name }, value);
          try {
            await producer.purge();
            let deadAtRelease = Number.NaN;
            const result = await steadyRun(producer, consumer, durationMs, STEADY_RATE, async () => {
              await sleep(holdFromMs);
              const held = await holdSnapshot(target);
              await sleep(holdMs - 1_000);
              deadAtRelease = (await producer.tableStats())?.deadTuples ?? Number.NaN;
              await sleep(1_000);
              await held.release();
            });
            const windows = [
              ['before', 0, holdFromMs],
              ['during', holdFromMs, holdFromMs + holdMs],
              ['after', holdFromMs + holdMs, durationMs],
            ] as const;
            for (const [name, from, to] of windows) {
              rec(`${label}: achieved rate ${name}`, 'jobs/s', rateIn(result, from, to));
            }
            ctx.record(
              {
                scenario,
                case: `${label}: achieved rate during / before`,
                unit: 'ratio',
                system: system.name,
                tag: 'snapshot.steady-ratio',
              },
              rateIn(result, holdFromMs, holdFromMs + holdMs) / rateIn(result, 0, holdFromMs),
            );
            for (const [name, from, to] of windows) {
              rec(
                `${label}: latency p99 ${name}`,
                'ms (lower is better)',
                quantile(latenciesIn(result, from, to), 0.99),
              );
            }
            await sleep(1_500);
            rec(`${label}: dead tuples when released`, 'rows (lower is better)', deadAtRelease);
            rec(
              `${label}: dead tuples at end`,
              'rows (lower is better)',
              (await producer.tableStats())?.deadTuples ?? Number.NaN,
            );

            // Drain throughput with a snapshot taken before the jobs were enqueued, against none.
            await producer.purge();
            const shape = { processes: 1, concurrency: STEADY_CONCURRENCY };
            const free = await drainOnce(producer, target, drainJobs, shape);
            const held = await holdSnapshot(target);
            let blocked = Number.NaN;
            try {
              blocked = await drainOnce(producer, target, drainJobs, shape);
            } catch (error) {
              // A drain that never empties is a finding, not a reason to lose the other figures.
              ctx.note(`held snapshot, run ${run + 1}: ${system.name}: ${String(error)}`);
              await producer.purge();
            } finally {
              await held.release();
            }
            rec(
              `drain ${drainJobs.toLocaleString('en-US')}, 1 process × ${shape.concurrency}: no snapshot`,
              'jobs/s',
              free,
            );
            rec(
              `drain ${drainJobs.toLocaleString('en-US')}, 1 process × ${shape.concurrency}: snapshot held`,
              'jobs/s',
              blocked,
            );
            ctx.record(
              {
                scenario,
                case: `drain ${drainJobs.toLocaleString('en-US')}: snapshot held / no snapshot`,
                unit: 'ratio',
                system: system.name,
                tag: 'snapshot.drain-ratio',
              },
              blocked / free,
            );
            ctx.log(
              `  snapshot run ${run + 1}: ${system.name} during ${Math.round(rateIn(result, holdFromMs, holdFromMs + holdMs))} jobs/s; drain ${Math.round(free)} → ${Math.round(blocked)} jobs/s held`,
            );
          } finally {
            await producer.close();
            await consumer.close();
          }
        }
      } finally {
        await system.destroy(target);
      }
    }
  },
};
