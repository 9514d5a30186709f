/**
 * Scenario 7, the limit: skiplock's claim-and-delete cycle in bare SQL through
 * `pg` (batch 1 and 100, 1 and 4 connections), and the one-statement DELETE …
 * SKIP LOCKED also under `pgbench` (8 clients), on 20,000 jobs like the drain
 * scenario (batch 1: fewer, as each job costs a commit). The rows skiplock's
 * drains are held against ("same statements") run skiplock's own claim and
 * fenced complete statements without the rest of the library, on one
 * connection per claim loop, with the worker pool's session settings: at 100
 * jobs a claim, and at the claim size of skiplock's defaults.
 */
import { adminQuery } from '../database.js';
import {
  type Cycle,
  createRawDatabase,
  dropRawDatabase,
  hasPgbench,
  pgbenchDrain,
  prefill,
  rawDrain,
} from '../systems/raw-pg.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

/** Claim sizes of the ceiling rows: 100, and what skiplock's defaults claim at concurrency 10 (10 + 500). */
const CEILING_BATCHES = [100, 510] as const;
const CEILING_CONNECTIONS = 4;

export const ceilingScenario: Scenario = {
  id: 7,
  title: 'The limit (bare SQL)',
  async run(ctx: BenchContext) {
    // A commit per job makes batch 1 slow on a synced disk: fewer jobs keep the run short.
    const jobsOf = (batch: number) =>
      batch === 1 ? (ctx.smoke ? 500 : ctx.quick ? 2_000 : 5_000) : ctx.smoke ? 2_000 : 20_000;
    const namespace = namespaceFor('rawpg', 'ceiling');
    const url = await createRawDatabase(ctx.serverUrl, namespace);
    const pgbench = await hasPgbench();
    if (!pgbench) ctx.note('pgbench not found: its rows are missing');
    const scenario = '7. Ceiling';
    const label = (cycle: Cycle) =>
      cycle === 'claim+delete'
        ? "skiplock's claim, then delete (2 statements)"
        : 'DELETE … SKIP LOCKED (1 statement)';
    try {
      for (let run = 0; run < ctx.runs; run++) {
        for (const batch of CEILING_BATCHES) {
          await adminTruncate(url);
          await prefill(url, jobsOf(batch));
          const ceiling = await rawDrain(url, 'claim+delete', batch, CEILING_CONNECTIONS, true);
          ctx.record(
            {
              scenario,
              case: `skiplock's own statements: claim LIMIT ${batch} + one fenced DELETE per batch, ${jobsOf(batch)} jobs, ${CEILING_CONNECTIONS} connections, worker session settings (the ceiling at ${batch})`,
              unit: 'jobs/s',
              system: 'raw-pg',
              tag: batch === 100 ? 'ceiling.same-statements' : 'ceiling.same-statements-large',
            },
            ceiling,
          );
        }
        for (const cycle of ['claim+delete', 'delete'] as const) {
          for (const batch of [1, 100]) {
            for (const connections of [1, 4]) {
              await adminTruncate(url);
              await prefill(url, jobsOf(batch));
              const value = await rawDrain(url, cycle, batch, connections);
              ctx.record(
                {
                  scenario,
                  case: `${label(cycle)}, batch ${batch}, ${jobsOf(batch)} jobs, ${connections} connection${connections > 1 ? 's' : ''}`,
                  unit: 'jobs/s',
                  system: 'raw-pg',
                },
                value,
              );
            }
            if (pgbench && cycle === 'delete') {
              await adminTruncate(url);
              await prefill(url, jobsOf(batch));
              const value = await pgbenchDrain(url, batch, 8, jobsOf(batch));
              ctx.record(
                {
                  scenario,
                  case: `${label(cycle)}, batch ${batch}, ${jobsOf(batch)} jobs, 8 clients`,
                  unit: 'jobs/s',
                  system: 'pgbench',
                },
                value,
              );
            }
          }
        }
        ctx.log(`  ceiling run ${run + 1} done`);
      }
    } finally {
      await dropRawDatabase(url, namespace);
    }
  },
};

async function adminTruncate(url: string): Promise<void> {
  await adminQuery(url, 'TRUNCATE skiplock.jobs');
}
