/**
 * `npm run bench`: skiplock side by side with graphile-worker, pg-boss and
 * BullMQ, and the bare-SQL ceiling. See BENCHMARKS.md for what each scenario
 * measures and how to read the table.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Command } from 'commander';
import { startTestServer, type TestServer } from '../test/support/pg-server.js';
import { dropLeftovers } from './database.js';
import { describeMachine } from './machine.js';
import { type Measurement, renderReport } from './report.js';
import { ceilingScenario } from './scenarios/ceiling.js';
import { drainScenario } from './scenarios/drain.js';
import { enqueueScenario } from './scenarios/enqueue.js';
import { groupedDrainScenario } from './scenarios/grouped-drain.js';
import { heldSnapshotScenario } from './scenarios/held-snapshot.js';
import { latencyScenario } from './scenarios/latency.js';
import { memoryScenario } from './scenarios/memory.js';
import { relayScenario } from './scenarios/relay.js';
import type { BenchContext, Scenario } from './scenarios/scenario.js';
import { steadyStateScenario } from './scenarios/steady-state.js';
import { tableSizeScenario } from './scenarios/table-size.js';
import { volumeScenario } from './scenarios/volume.js';
import { SYSTEMS, systemByName } from './systems/index.js';

const SCENARIOS: readonly Scenario[] = [
  enqueueScenario,
  drainScenario,
  latencyScenario,
  steadyStateScenario,
  tableSizeScenario,
  heldSnapshotScenario,
  ceilingScenario,
  memoryScenario,
  volumeScenario,
  groupedDrainScenario,
  relayScenario,
];
const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
const RESULTS = new URL('./results/', import.meta.url);

const program = new Command('bench')
  .description('skiplock side by side with graphile-worker, pg-boss, BullMQ and bare SQL')
  .option('--database-url <url>', 'PostgreSQL server to measure on (env BENCH_DATABASE_URL)')
  .option('--embedded', 'measure on a throwaway embedded PostgreSQL 18 instead')
  .option('--quick', 'fewer and shorter runs (the whole suite in a few minutes)')
  .option('--only <ids>', 'comma-separated scenario numbers, e.g. 2,3')
  .option('--systems <names>', 'comma-separated systems (default: all available)')
  .option('--runs <n>', 'runs per figure (at least 3)', (v) => Number.parseInt(v, 10))
  .option('--merge', "keep latest.json's figures of the scenarios not run now, in the report")
  .option('--no-write', 'print only; do not write bench/results/latest.md');

async function main(): Promise<void> {
  program.parse();
  const opts = program.opts<{
    databaseUrl?: string;
    embedded?: boolean;
    quick?: boolean;
    only?: string;
    systems?: string;
    runs?: number;
    merge?: boolean;
    write: boolean;
  }>();
  const only = opts.only?.split(',').map((s) => Number.parseInt(s.trim(), 10));
  const scenarios = SCENARIOS.filter((s) => !only || only.includes(s.id));
  if (scenarios.length === 0)
    throw new Error(`--only ${opts.only}: no such scenario (1–${SCENARIOS.length})`);
  // BENCH_SMOKE=1: tiny sizes and one run by default, only to prove the scenarios run end to end.
  const smoke = process.env.BENCH_SMOKE === '1';
  const runs = Math.max(smoke ? 1 : 3, opts.runs ?? (smoke ? 1 : 3));

  let server: TestServer | undefined;
  let serverUrl = opts.databaseUrl ?? process.env.BENCH_DATABASE_URL ?? DEFAULT_URL;
  if (opts.embedded) {
    server = await startTestServer();
    serverUrl = server.url;
  }
  const measurements: Measurement[] = [];
  const notes: string[] = [];
  if (opts.merge && existsSync(new URL('latest.json', RESULTS))) {
    const earlier = JSON.parse(readFileSync(new URL('latest.json', RESULTS), 'utf8')) as {
      measurements: (Omit<Measurement, 'samples'> & { samples: (number | null)[] })[];
      notes: string[];
    };
    const rerun = (scenario: string) => scenarios.some((s) => scenario.startsWith(`${s.id}.`));
    // JSON has no +∞ (a latency of a job that never ran): it comes back as null.
    const revived = earlier.measurements.map((m) => ({
      ...m,
      samples: m.samples.map((v) => v ?? Number.POSITIVE_INFINITY),
    }));
    measurements.push(...revived.filter((m) => !rerun(m.scenario)));
    const stale = (note: string) =>
      scenarios.some((s) => note.startsWith(`scenario ${s.id} `)) ||
      (scenarios.some((s) => s.id === 5) && note.startsWith('claim plan'));
    notes.push(...earlier.notes.filter((n) => !stale(n)));
  }
  try {
    await dropLeftovers(serverUrl);
    const wanted = opts.systems?.split(',').map((s) => systemByName(s.trim())) ?? SYSTEMS;
    const systems = [];
    for (const system of wanted) {
      if (await system.available()) systems.push(system);
      else notes.push(`${system.name} skipped: not available here`);
    }
    const ctx: BenchContext = {
      serverUrl,
      quick: (opts.quick ?? false) || smoke,
      smoke,
      runs,
      systems,
      log: (line) => console.log(line),
      record(m, value) {
        let found = measurements.find(
          (x) => x.scenario === m.scenario && x.case === m.case && x.unit === m.unit && x.system === m.system,
        );
        if (!found) {
          found = { ...m, samples: [] };
          measurements.push(found);
        }
        found.samples.push(value);
      },
      note: (text) => notes.push(text),
    };
    const started = Date.now();
    for (const scenario of scenarios) {
      console.log(`scenario ${scenario.id}: ${scenario.title}`);
      try {
        await scenario.run(ctx);
      } catch (error) {
        // One broken scenario must not cost the figures of the others.
        console.error(error);
        notes.push(`scenario ${scenario.id} (${scenario.title}) failed: ${String(error).split('\n')[0]}`);
      }
    }
    const machine = await describeMachine(serverUrl, [
      `run: ${smoke ? 'BENCH_SMOKE=1 (tiny sizes: the figures mean nothing) ' : ''}${process.argv.slice(2).join(' ') || '(defaults)'}; ${runs} runs per figure; ${Math.round((Date.now() - started) / 1000)} s`,
      `skiplock engine: ${process.env.SKIPLOCK_BENCH_SRC ?? 'src/ of this tree'}`,
      ...SYSTEMS.map((s) => `${s.name}: ${s.settings}`),
      ...(server ? ['server: embedded PostgreSQL 18 (fsync=off)'] : []),
    ]);
    const report = renderReport(
      measurements,
      SYSTEMS.map((s) => s.name).concat('raw-pg', 'pgbench'),
      machine,
      notes,
      {
        peers: SYSTEMS.filter((s) => s.name !== 'skiplock').map((s) => s.name),
        postgres: SYSTEMS.filter((s) => s.name !== 'skiplock' && s.postgres).map((s) => s.name),
      },
    );
    console.log(`\n${report}`);
    if (opts.write) {
      mkdirSync(RESULTS, { recursive: true });
      writeFileSync(new URL('latest.md', RESULTS), report);
      writeFileSync(new URL('latest.json', RESULTS), JSON.stringify({ measurements, notes }, null, 2));
    }
  } finally {
    await server?.destroy();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
