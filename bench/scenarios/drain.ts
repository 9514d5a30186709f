/**
 * Scenario 2, drain: 20,000 no-op jobs already queued, then worker processes
 * (child_process.fork) started at once; jobs/s from the start signal until the
 * queue is empty (every result written). Also used by scenario 5.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BenchSystem, SystemClient, Target } from '../systems/system.js';
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

/** One drain setup: processes × handlers each. */
export interface DrainShape {
  processes: number;
  concurrency: number;
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
): Promise<number> {
  for (let from = 0; from < jobs; from += ENQUEUE_CHUNK) {
    await client.enqueueMany(payloads(Math.min(ENQUEUE_CHUNK, jobs - from), from));
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
    });
  });
  const send = (m: ToWorker) => {
    for (const child of children) child.send(m);
  };
  try {
    const ready = waiting('ready');
    send({ type: 'init', target, concurrency: shape.concurrency });
    await ready;
    const startedAt = performance.now();
    send({ type: 'go' });
    const handled = await waitFor(() => counts.reduce((a, b) => a + b, 0) >= jobs, DRAIN_TIMEOUT_MS, 2);
    const empty = handled && (await waitFor(async () => (await client.remaining()) === 0, 30_000, 5));
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

/** The drain shapes of scenario 2. */
export const DRAIN_SHAPES: readonly DrainShape[] = [
  { processes: 1, concurrency: 10 },
  { processes: 1, concurrency: 50 },
  { processes: 4, concurrency: 50 },
];

/** Label of a drain shape in the report. */
export function shapeLabel(shape: DrainShape): string {
  return `${shape.processes} process${shape.processes > 1 ? 'es' : ''} × concurrency ${shape.concurrency}`;
}

export const drainScenario: Scenario = {
  id: 2,
  title: 'Drain',
  async run(ctx: BenchContext) {
    const jobs = 20_000;
    const targets = new Map<BenchSystem, OpenTarget>();
    try {
      // Every system's database exists for the whole scenario, so that runs interleave across systems.
      for (const system of ctx.systems) targets.set(system, await openTarget(ctx, system, 'drain'));
      for (let run = 0; run < ctx.runs; run++) {
        for (const shape of DRAIN_SHAPES) {
          for (const system of ctx.systems) {
            const t = targets.get(system)!;
            const value = await drainOnce(t.client, t.target, jobs, shape);
            ctx.record(
              {
                scenario: '2. Drain',
                case: `${jobs.toLocaleString('en-US')} no-op jobs, ${shapeLabel(shape)}`,
                unit: 'jobs/s',
                system: system.name,
              },
              value,
            );
            ctx.log(
              `  drain run ${run + 1}: ${system.name} ${shapeLabel(shape)}: ${Math.round(value)} jobs/s`,
            );
          }
        }
      }
    } finally {
      for (const t of targets.values()) await t.close();
    }
  },
};
