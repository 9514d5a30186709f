/**
 * Telemetry A/B (tracing, or with `--metrics` Prometheus metrics): the drain of scenario 2 (20,000 no-op jobs queued first, a
 * worker with skiplock's defaults, concurrency 10) with tracing off and on, in
 * one process, runs alternating (off/on, then on/off) after one warm-up drain
 * of each, so that both measure warmed-up code. jobs/s from the worker's start
 * until every result is written, and the process's CPU time per job over that
 * time; median (min–max). With tracing on, the jobs are enqueued by a traced
 * Skiplock inside a span, so each carries a stored context.
 *
 *   node --import tsx bench/tracing.ts [--sdk | --metrics] [--runs 5] [--jobs 20000] [--concurrency 10] [--handler-ms 0]
 *
 * `--metrics` compares a worker without metrics to one observed by
 * `createMetrics` (counters and the run-time histogram per kind, fed by its
 * events; scraped once per drain), tracing off in both.
 *
 * `--handler-ms N` makes each handler wait N ms (a timer) instead of returning at once.
 *
 * Without `--sdk` no OpenTelemetry SDK is registered: tracing on costs what
 * skiplock itself does (the trace column, the context, no-op spans). With
 * `--sdk`, one that samples every span (bench/tracing-sdk.ts) is registered for
 * both modes, as in an app that runs one anyway. The server is
 * BENCH_DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres.
 */
import { parseArgs } from 'node:util';
import { trace } from '@opentelemetry/api';
import { Skiplock } from '../src/index.js';
import { createMetrics } from '../src/telemetry/metrics.js';
import { createDatabase, dropDatabase } from './database.js';
import { median } from './report.js';
import { payloads, sleep } from './scenarios/scenario.js';
import { exportedSpans, registerSdk } from './tracing-sdk.js';

const CHUNK = 5_000;
const what = process.argv.includes('--metrics') ? 'metrics' : 'tracing';

const { values } = parseArgs({
  options: {
    sdk: { type: 'boolean', default: false },
    metrics: { type: 'boolean', default: false },
    runs: { type: 'string', default: '5' },
    jobs: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '10' },
    'handler-ms': { type: 'string', default: '0' },
  },
});
const runs = Number(values.runs);
const jobs = Number(values.jobs);
const concurrency = Number(values.concurrency);
const handlerMs = Number(values['handler-ms']);
const serverUrl = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const namespace = `skbench_tracing_${process.pid}_1`;

type Mode = 'off' | 'on';
const shutdownSdk = values.sdk ? registerSdk() : undefined;
const url = await createDatabase(serverUrl, namespace);
const rate: Record<Mode, number[]> = { off: [], on: [] };
const cpu: Record<Mode, number[]> = { off: [], on: [] };
const skiplocks: Record<Mode, Skiplock> = {
  off: new Skiplock({ connectionString: url }),
  on: new Skiplock({ connectionString: url, tracing: !values.metrics }),
};

/** Enqueues the jobs with `mode`'s Skiplock, drains them with its worker; jobs/s and µs CPU per job. */
async function drain(mode: Mode): Promise<{ rate: number; cpuUs: number; stored: number }> {
  const skiplock = skiplocks[mode];
  await trace.getTracer('bench').startActiveSpan('bench enqueue', async (span) => {
    for (let from = 0; from < jobs; from += CHUNK) {
      const chunk = payloads(Math.min(CHUNK, jobs - from), from);
      await skiplock.enqueueMany(chunk.map((payload) => ({ kind: 'noop', payload })));
    }
    span.end();
  });
  const { rows } = await skiplocks.off.pool.query<{ n: number }>(
    'SELECT count(trace_context)::int AS n FROM skiplock.jobs',
  );
  await skiplocks.off.pool.query('VACUUM ANALYZE skiplock.jobs');
  let handled = 0;
  const worker = skiplock.worker({
    concurrency,
    handleSignals: false,
    handlers: {
      noop:
        handlerMs > 0
          ? async () => {
              await sleep(handlerMs);
              handled++;
            }
          : () => {
              handled++;
            },
    },
  });
  const metrics = values.metrics && mode === 'on' ? await createMetrics(skiplock) : undefined;
  const unobserve = metrics?.observeWorker(worker);
  worker.on('error', (error, source) => console.error(`skiplock ${source}: ${error.message}`));
  // The autovacuum warning of a benchmark server is expected.
  worker.on('worker:warning', () => {});
  const cpuAtStart = process.cpuUsage();
  const startedAt = performance.now();
  await worker.start();
  while (handled < jobs) await sleep(2);
  for (;;) {
    const { rows: left } = await skiplocks.off.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM skiplock.jobs',
    );
    if (left[0]!.n === 0) break;
    await sleep(5);
  }
  const ms = performance.now() - startedAt;
  if (metrics) await metrics.text();
  const used = process.cpuUsage(cpuAtStart);
  unobserve?.();
  await worker.stop();
  return { rate: jobs / (ms / 1000), cpuUs: (used.user + used.system) / jobs, stored: rows[0]!.n };
}

try {
  await skiplocks.off.migrate();
  for (const mode of ['off', 'on'] as const) await drain(mode);
  for (let run = 0; run < runs; run++) {
    for (const mode of run % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      const result = await drain(mode);
      rate[mode].push(result.rate);
      cpu[mode].push(result.cpuUs);
      console.log(
        `run ${run + 1} ${what} ${mode}: ${Math.round(result.rate)} jobs/s, ${result.cpuUs.toFixed(1)} µs CPU/job (${result.stored} jobs with a stored context)`,
      );
    }
  }
} finally {
  await skiplocks.off.close();
  await skiplocks.on.close();
  await dropDatabase(serverUrl, namespace);
  await shutdownSdk?.();
}

const range = (xs: number[], digits: number) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;
console.log(
  `\n${jobs.toLocaleString('en-US')} ${handlerMs > 0 ? `${handlerMs} ms` : 'no-op'} jobs, 1 worker × concurrency ${concurrency}, ${runs} runs each, ${values.sdk ? `an SDK sampling every span (${exportedSpans} spans exported)` : 'no SDK'}`,
);
for (const mode of ['off', 'on'] as const)
  console.log(`${what} ${mode.padEnd(3)}: ${range(rate[mode], 0)} jobs/s, ${range(cpu[mode], 1)} µs CPU/job`);
console.log(
  `on / off: ${((median(rate.on) / median(rate.off)) * 100).toFixed(1)} % of the throughput, ${((median(cpu.on) / median(cpu.off)) * 100).toFixed(1)} % of the CPU per job (medians)`,
);
