/**
 * Scenario 2, drain: 20,000 no-op jobs already queued, then worker processes
 * (child_process.fork) started at once; jobs/s from the start signal until the
 * queue is empty (every result written). Every system runs the same shapes
 * (1 × 10 is skiplock with its defaults); skiplock also runs tuned rows, and
 * the scenario ends with comparison rows: skiplock's defaults against each
 * peer at 1 × 50 and at its best row, and each system's best row. After each
 * of skiplock's one-process rows, the bare loop (skiplock's own claim and
 * fenced DELETE, no library) drains the same jobs at the same claim size,
 * forked and started the same way, for the row that holds skiplock's best
 * against it. Also used by scenarios 5, 6 and 8.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { resolveWorkerOptions } from '../../src/worker/options.js';
import { median } from '../report.js';
import { BARE_LOOP_CONNECTIONS, bareLoopSystem } from '../systems/bare-loop.js';
import type { BenchSystem, SkiplockTuning, SystemClient, Target } from '../systems/system.js';
import type { FromWorker, ToWorker } from '../worker-process.js';
import {
  type BenchContext,
  type OpenTarget,
  openTarget,
  payloads,
  type Scenario,
  sleep,
  waitFor,
} from './scenario.js';

const WORKER_PROCESS = fileURLToPath(new URL('../worker-process.ts', import.meta.url));
const DRAIN_TIMEOUT_MS = 180_000;
const ENQUEUE_CHUNK = 5_000;

/** One drain setup: processes × handlers each, and skiplock's options beyond its defaults. */
export interface DrainShape {
  processes: number;
  concurrency: number;
  /** skiplock only (the row is skiplock's alone): prefetch/batchSize instead of the defaults. */
  tuning?: SkiplockTuning;
}

/** A resident-set sample of a worker process: bytes, and the jobs it had handled by then. */
export interface MemorySample {
  rss: number;
  count: number;
}

/** What else a drain may do. */
export interface DrainOptions {
  /** Jobs per enqueue call before the start (default 5,000). */
  enqueueChunk?: number;
  /** Receives each worker process's resident set size every 500 ms (process index, sample). */
  onMemory?: (process: number, sample: MemorySample) => void;
}

/**
 * Enqueues `jobs` no-op jobs on `target`, starts `shape.processes` forked
 * workers, and returns jobs/s until the queue is empty.
 *
 * @throws {Error} when the queue is not empty after the drain timeout.
 */
export async function drainOnce(
  client: SystemClient,
  target: Target,
  jobs: number,
  shape: DrainShape,
  options: DrainOptions = {},
): Promise<number> {
  const chunk = options.enqueueChunk ?? ENQUEUE_CHUNK;
  for (let from = 0; from < jobs; from += chunk) {
    await client.enqueueMany(payloads(Math.min(chunk, jobs - from), from));
  }
  const children = Array.from({ length: shape.processes }, () =>
    fork(WORKER_PROCESS, [], { execArgv: ['--import', 'tsx'], stdio: 'inherit' }),
  );
  const counts = new Array<number>(children.length).fill(0);
  const waiting = (type: FromWorker['type']) =>
    Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve, reject) => {
            const onMessage = (m: FromWorker) => {
              if (m.type === type) {
                child.off('message', onMessage);
                resolve();
              }
            };
            child.on('message', onMessage);
            child.once('exit', (code) => {
              if (type !== 'stopped') reject(new Error(`worker process exited with ${code}`));
              else resolve();
            });
          }),
      ),
    );
  children.forEach((child, k) => {
    child.on('message', (m: FromWorker) => {
      if (m.type === 'count') counts[k] = m.count;
      else if (m.type === 'memory') options.onMemory?.(k, { rss: m.rss, count: m.count });
    });
  });
  const send = (m: ToWorker) => {
    for (const child of children) child.send(m);
  };
  try {
    const ready = waiting('ready');
    send({
      type: 'init',
      target,
      concurrency: shape.concurrency,
      ...(shape.tuning ? { tuning: shape.tuning } : {}),
      memory: options.onMemory !== undefined,
    });
    await ready;
    const startedAt = performance.now();
    send({ type: 'go' });
    // A million-job drain (scenario 8) may take longer than the usual limit.
    const timeoutMs = Math.max(DRAIN_TIMEOUT_MS, jobs);
    const handled = await waitFor(() => counts.reduce((a, b) => a + b, 0) >= jobs, timeoutMs, 2);
    // Results may still be on their way once every handler ran: wait for them within the same limit.
    const resultsMs = Math.max(30_000, timeoutMs - (performance.now() - startedAt));
    const empty = handled && (await waitFor(async () => (await client.remaining()) === 0, resultsMs, 5));
    const elapsedMs = performance.now() - startedAt;
    if (!empty) {
      const left = await client.remaining();
      throw new Error(
        `queue not drained: ${counts.join('+')} of ${jobs} handled, ${left} still due or running`,
      );
    }
    return jobs / (elapsedMs / 1000);
  } finally {
    const stopped = waiting('stopped');
    send({ type: 'stop' });
    await Promise.race([stopped, sleep(30_000)]);
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  }
}

/** The drain shapes of scenario 2 that every system runs; the first is skiplock's defaults. */
export const DRAIN_SHAPES: readonly DrainShape[] = [
  { processes: 1, concurrency: 10 },
  { processes: 1, concurrency: 50 },
  { processes: 4, concurrency: 50 },
];

/**
 * skiplock-only rows: options beyond the defaults, for "skiplock's best". The
 * first claims up to 2,050 jobs at a time (the defaults claim up to 510 at
 * concurrency 10, like graphile-worker's local queue of 500).
 */
export const TUNED_SHAPES: readonly DrainShape[] = [
  { processes: 1, concurrency: 50, tuning: { prefetch: 2000 } },
  { processes: 1, concurrency: 200 },
];

/**
 * Most jobs one claim of skiplock's takes in a shape's drain of no-op jobs:
 * the `batchSize` the worker resolves from the shape's options (no-op jobs
 * never cap it).
 */
export function claimSizeOf(shape: DrainShape): number {
  const { concurrency, tuning } = shape;
  return resolveWorkerOptions({ concurrency, ...tuning, handlers: { noop: () => {} } }).batchSize;
}

/** Label of a drain shape in the report. */
export function shapeLabel(shape: DrainShape): string {
  const base = `${shape.processes} process${shape.processes > 1 ? 'es' : ''} × concurrency ${shape.concurrency}`;
  const tuning = Object.entries(shape.tuning ?? {}).map(([k, v]) => `${k} ${v}`);
  return tuning.length > 0 ? `${base}, ${tuning.join(', ')}` : base;
}

/** The jobs of one drain in scenario 2. */
export function drainJobs(ctx: BenchContext): number {
  return ctx.smoke ? 2_000 : 20_000;
}

export const drainScenario: Scenario = {
  id: 2,
  title: 'Drain',
  async run(ctx: BenchContext) {
    const jobs = drainJobs(ctx);
    const scenario = '2. Drain';
    const unit = 'jobs/s';
    const prefix = `${jobs.toLocaleString('en-US')} no-op jobs`;
    const defaults = DRAIN_SHAPES[0]!;
    const caseOf = (shape: DrainShape) => {
      if (shape === defaults) return `${prefix}, ${shapeLabel(shape)} (skiplock: defaults)`;
      if (TUNED_SHAPES.includes(shape)) return `${prefix}, ${shapeLabel(shape)} (skiplock only)`;
      return `${prefix}, ${shapeLabel(shape)}`;
    };
    // Samples by system, then by shape, for the comparison rows below the measured ones.
    const samples = new Map<string, Map<DrainShape, number[]>>();
    // The bare loop at the claim size of each of skiplock's one-process shapes, run right after it.
    const bareSamples = new Map<DrainShape, number[]>();
    const targets = new Map<BenchSystem, OpenTarget>();
    let bare: OpenTarget | undefined;
    try {
      // Every system's database exists for the whole scenario, so that runs interleave across systems.
      for (const system of ctx.systems) targets.set(system, await openTarget(ctx, system, 'drain'));
      if (ctx.systems.some((s) => s.name === 'skiplock'))
        bare = await openTarget(ctx, bareLoopSystem, 'drain');
      for (let run = 0; run < ctx.runs; run++) {
        for (const shape of [...DRAIN_SHAPES, ...TUNED_SHAPES]) {
          for (const system of ctx.systems) {
            if (TUNED_SHAPES.includes(shape) && system.name !== 'skiplock') continue;
            const t = targets.get(system)!;
            const value = await drainOnce(t.client, t.target, jobs, shape);
            ctx.record({ scenario, case: caseOf(shape), unit, system: system.name }, value);
            const bySystem = samples.get(system.name) ?? new Map<DrainShape, number[]>();
            samples.set(system.name, bySystem);
            bySystem.set(shape, [...(bySystem.get(shape) ?? []), value]);
            ctx.log(
              `  drain run ${run + 1}: ${system.name} ${shapeLabel(shape)}: ${Math.round(value)} jobs/s`,
            );
            if (bare && system.name === 'skiplock' && shape.processes === 1) {
              // The loop at its best in this run: more connections claim side by side, fewer start sooner.
              const claim = claimSizeOf(shape);
              let bestBare = 0;
              for (const connections of BARE_LOOP_CONNECTIONS) {
                const bareValue = await drainOnce(bare.client, bare.target, jobs, {
                  processes: 1,
                  concurrency: connections,
                  tuning: { batchSize: claim },
                });
                ctx.record(
                  {
                    scenario,
                    case: `${prefix}, the bare loop at the claim size of skiplock's ${shapeLabel(shape)}: skiplock's claim of ${claim} + fenced DELETE, ${connections} connections, forked and started like the rows above`,
                    unit,
                    system: 'raw-pg',
                  },
                  bareValue,
                );
                bestBare = Math.max(bestBare, bareValue);
                ctx.log(
                  `  drain run ${run + 1}: bare loop, claims of ${claim}, ${connections} connections: ${Math.round(bareValue)} jobs/s`,
                );
              }
              bareSamples.set(shape, [...(bareSamples.get(shape) ?? []), bestBare]);
            }
          }
        }
      }
    } finally {
      for (const t of targets.values()) await t.close();
      await bare?.close();
    }

    // The comparisons the targets are about, as rows of their own: skiplock's
    // defaults against each peer at 1 × 50, and each system's best row against
    // skiplock's defaults and skiplock's best.
    const bestOf = (system: string) => {
      let best: [DrainShape, number[]] | undefined;
      for (const [shape, values] of samples.get(system) ?? []) {
        if (!best || median(values) > median(best[1])) best = [shape, values];
      }
      return best;
    };
    const fiftyShape = DRAIN_SHAPES[1]!;
    const bests: string[] = [];
    for (const [system, bySystem] of samples) {
      const best = bestOf(system)!;
      bests.push(`${system} ${shapeLabel(best[0])}`);
      const isSkiplock = system === 'skiplock';
      const rows: [string, string, readonly number[] | undefined][] = [
        [
          `${prefix}: skiplock defaults (1 × 10) vs each peer at 1 × 50`,
          'drain.defaults-vs-50',
          isSkiplock ? bySystem.get(defaults) : bySystem.get(fiftyShape),
        ],
        [
          `${prefix}: skiplock defaults (1 × 10) vs each peer's best row`,
          'drain.defaults-vs-best',
          isSkiplock ? bySystem.get(defaults) : best[1],
        ],
        [`${prefix}: each system's best row (skiplock's best vs each peer's best)`, 'drain.best', best[1]],
      ];
      for (const [kase, tag, values] of rows) {
        for (const value of values ?? []) ctx.record({ scenario, case: kase, unit, system, tag }, value);
      }
      const bareValues = isSkiplock ? bareSamples.get(best[0]) : undefined;
      if (bareValues) {
        const kase = `${prefix}: skiplock's best row vs the bare loop at its claim size (${claimSizeOf(best[0])}; the better connection count of each run)`;
        for (const [who, values] of [
          ['skiplock', best[1]],
          ['raw-pg', bareValues],
        ] as const) {
          for (const value of values)
            ctx.record({ scenario, case: kase, unit, system: who, tag: 'drain.best-vs-bare' }, value);
        }
      }
    }
    ctx.note(`scenario 2 best rows (median jobs/s): ${bests.join('; ')}`);
  },
};
