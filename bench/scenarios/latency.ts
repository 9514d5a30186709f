/**
 * Scenario 3, idle latency: a started, idle worker in this process; jobs
 * enqueued one by one 20 ms apart; the time from just before the enqueue call
 * to the handler's start, on this process's clock. Runs interleave across
 * systems.
 */
import { quantile } from '../report.js';
import type { BenchSystem } from '../systems/system.js';
import { type BenchContext, type OpenTarget, openTarget, type Scenario, sleep, waitFor } from './scenario.js';

const SPACING_MS = 20;

export const latencyScenario: Scenario = {
  id: 3,
  title: 'Idle latency',
  async run(ctx: BenchContext) {
    const jobs = ctx.smoke ? 50 : ctx.quick ? 200 : 500;
    const targets = new Map<BenchSystem, OpenTarget>();
    try {
      // Every system's database exists for the whole scenario, so that runs interleave across
      // systems: a machine that drifts during the scenario weighs on each alike.
      for (const system of ctx.systems) targets.set(system, await openTarget(ctx, system, 'latency'));
      for (let run = 0; run < ctx.runs; run++) {
        for (const system of ctx.systems) {
          const client = targets.get(system)!.client;
          const enqueuedAt = new Float64Array(jobs);
          const latencies: number[] = [];
          const worker = await client.startWorker({
            concurrency: 10,
            handler: ({ i }) => {
              if (i >= 0) latencies.push(performance.now() - enqueuedAt[i]!);
            },
          });
          // Let the worker settle into its idle state (first poll done, LISTEN up).
          await sleep(1_000);
          const startedAt = performance.now();
          for (let i = 0; i < jobs; i++) {
            const due = startedAt + i * SPACING_MS;
            const wait = due - performance.now();
            if (wait > 0) await sleep(wait);
            enqueuedAt[i] = performance.now();
            await client.enqueueOne({ i });
          }
          const all = await waitFor(() => latencies.length >= jobs, 30_000);
          await worker.stop();
          if (!all) ctx.note(`latency: ${system.name} ran ${latencies.length} of ${jobs} jobs within 30 s`);
          const label = `${jobs} jobs ${SPACING_MS} ms apart, enqueue → handler start`;
          for (const [name, q] of [
            ['p50', 0.5],
            ['p95', 0.95],
            ['p99', 0.99],
          ] as const) {
            ctx.record(
              {
                scenario: '3. Idle latency',
                case: `${label}, ${name}`,
                unit: 'ms (lower is better)',
                system: system.name,
                tag: `latency.${name}`,
              },
              quantile(latencies, q),
            );
          }
          ctx.log(
            `  latency run ${run + 1}: ${system.name} p50 ${quantile(latencies, 0.5).toFixed(2)} ms, p99 ${quantile(latencies, 0.99).toFixed(2)} ms`,
          );
          await client.purge();
        }
      }
    } finally {
      for (const target of targets.values()) await target.close();
    }
  },
};
