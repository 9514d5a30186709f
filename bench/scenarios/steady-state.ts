/**
 * Scenario 4, mixed steady state: producers enqueue at a fixed rate (every
 * 10 ms, the jobs owed by then in one bulk call: one commit per job would cap
 * the rate at the disk's flush rate, ~500/s here, before any worker is
 * involved) while a worker in the same process runs handlers of 1–5 ms; achieved
 * rate, enqueue → handler-start latency, and the jobs table's size and dead
 * tuples at the end. Scenario 6 reuses {@link steadyRun}.
 */
import { quantile } from '../report.js';
import type { SystemClient } from '../systems/system.js';
import { type BenchContext, namespaceFor, type Scenario, sleep, waitFor } from './scenario.js';

/** Jobs per second the producers aim at. */
export const STEADY_RATE = 2_000;
/** Handlers of the steady-state worker. */
export const STEADY_CONCURRENCY = 50;
const TICK_MS = 10;
/** Producer calls in flight at most; beyond it the producers fall behind (and the report shows it). */
const MAX_IN_FLIGHT = 8;

/** What one steady-state run saw. */
export interface SteadyRun {
  /** Enqueue-call start of each job (ms, performance clock), by index. */
  enqueuedAt: number[];
  /** Handler start of each job (ms), by index; NaN when it never ran. */
  startedAt: number[];
  /** Run start on the performance clock. */
  t0: number;
  /** Jobs enqueued. */
  enqueued: number;
}

/**
 * Runs producers at `rate` jobs/s for `durationMs` (a bulk call every 10 ms on
 * `producer`) and a worker on `consumer`; `during(elapsedMs)` is awaited on a
 * side task at the start, for scenario 6's snapshot holder. Waits up to 10 s
 * after the producers stop for the worker to catch up.
 */
export async function steadyRun(
  producer: SystemClient,
  consumer: SystemClient,
  durationMs: number,
  rate = STEADY_RATE,
  during?: () => Promise<void>,
): Promise<SteadyRun> {
  const total = Math.round((durationMs / 1000) * rate);
  const enqueuedAt = new Array<number>(total).fill(Number.NaN);
  const startedAt = new Array<number>(total).fill(Number.NaN);
  let handled = 0;
  const worker = await consumer.startWorker({
    concurrency: STEADY_CONCURRENCY,
    handler: async ({ i }) => {
      startedAt[i] = performance.now();
      handled++;
      await sleep(1 + Math.random() * 4);
    },
  });
  await sleep(500);
  const t0 = performance.now();
  const side = during?.();
  let sent = 0;
  let inFlight = 0;
  const errors: unknown[] = [];
  while (performance.now() - t0 < durationMs) {
    const owed = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * rate));
    if (sent < owed && inFlight < MAX_IN_FLIGHT) {
      const batch = [];
      const at = performance.now();
      for (; sent < owed; sent++) {
        enqueuedAt[sent] = at;
        batch.push({ i: sent });
      }
      inFlight++;
      producer
        .enqueueMany(batch)
        .catch((error: unknown) => errors.push(error))
        .finally(() => {
          inFlight--;
        });
    }
    await sleep(TICK_MS);
  }
  await waitFor(() => inFlight === 0, 10_000);
  await waitFor(() => handled >= sent, 10_000, 20);
  await worker.stop();
  await side;
  if (errors.length > 0) throw new Error(`${errors.length} enqueue calls failed: ${String(errors[0])}`);
  return { enqueuedAt, startedAt, t0, enqueued: sent };
}

/** Jobs whose handler started in [fromMs, toMs) of the run, per second. */
export function rateIn(run: SteadyRun, fromMs: number, toMs: number): number {
  let n = 0;
  for (const s of run.startedAt) {
    const at = s - run.t0;
    if (at >= fromMs && at < toMs) n++;
  }
  return n / ((toMs - fromMs) / 1000);
}

/** Latencies (ms) of jobs enqueued in [fromMs, toMs) of the run; a job never run counts as +∞. */
export function latenciesIn(run: SteadyRun, fromMs: number, toMs: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < run.enqueued; i++) {
    const at = run.enqueuedAt[i]! - run.t0;
    if (at >= fromMs && at < toMs) {
      const started = run.startedAt[i]!;
      out.push(Number.isNaN(started) ? Number.POSITIVE_INFINITY : started - run.enqueuedAt[i]!);
    }
  }
  return out;
}

/** Duration of scenarios 4 and 6. */
export function steadyDurationMs(ctx: BenchContext): number {
  return ctx.smoke ? 6_000 : ctx.quick ? 10_000 : 60_000;
}

export const steadyStateScenario: Scenario = {
  id: 4,
  title: 'Mixed steady state',
  async run(ctx: BenchContext) {
    const durationMs = steadyDurationMs(ctx);
    const scenario = '4. Steady state';
    const label = `${STEADY_RATE} jobs/s in bulk calls every 10 ms for ${durationMs / 1000} s, handlers 1–5 ms, concurrency ${STEADY_CONCURRENCY}`;
    for (const system of ctx.systems) {
      const target = await system.create(ctx.serverUrl, namespaceFor(system.name, 'steady'));
      try {
        for (let run = 0; run < ctx.runs; run++) {
          const producer = await system.attach(target);
          const consumer = await system.attach(target);
          try {
            await producer.purge();
            const result = await steadyRun(producer, consumer, durationMs);
            const rec = (kase: string, unit: string, value: number) =>
              ctx.record({ scenario, case: `${label}: ${kase}`, unit, system: system.name }, value);
            rec('achieved rate', 'jobs/s', rateIn(result, 0, durationMs));
            const latencies = latenciesIn(result, 0, durationMs);
            rec('latency p50', 'ms (lower is better)', quantile(latencies, 0.5));
            rec('latency p95', 'ms (lower is better)', quantile(latencies, 0.95));
            rec('latency p99', 'ms (lower is better)', quantile(latencies, 0.99));
            // Backends flush their table statistics at most once a second.
            await sleep(1_500);
            const stats = await producer.tableStats();
            if (stats) {
              rec('table size at end', 'MB (lower is better)', stats.bytes / 2 ** 20);
              rec('dead tuples at end', 'rows (lower is better)', stats.deadTuples);
            }
            ctx.log(
              `  steady run ${run + 1}: ${system.name} ${Math.round(rateIn(result, 0, durationMs))} jobs/s, p99 ${quantile(latencies, 0.99).toFixed(1)} ms`,
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
