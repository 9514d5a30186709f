/**
 * Scenario 10, a grouped queue's drain (skiplock): 20,000 jobs over 1,000
 * group keys (quick: 5,000; smoke: 200 over 20), enqueued with one
 * enqueueMany, drained by one worker of concurrency 10, in three queues: one
 * without limits (the ordinary claim, prefetched), one with a queue
 * concurrency limit of 10 (the limited claim, one statement per claim of the
 * free slots) and one with groupConcurrency 1 (the grouped claim, prefetched:
 * the queue's only limit is per key). Jobs per second of each.
 */
import { loadEngine, skiplockSystem } from '../systems/skiplock.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

const MODES = ['without limits', 'concurrency 10', 'groupConcurrency 1'] as const;

async function drainOnce(
  ctx: BenchContext,
  mode: (typeof MODES)[number],
  jobs: number,
  keys: number,
): Promise<number> {
  const target = await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', 'grouped'));
  const { Skiplock } = await loadEngine();
  const skiplock = new Skiplock({ connectionString: target.databaseUrl });
  try {
    if (mode === 'concurrency 10') await skiplock.setQueueLimits('default', { concurrency: 10 });
    if (mode === 'groupConcurrency 1') await skiplock.setQueueLimits('default', { groupConcurrency: 1 });
    await skiplock.enqueueMany(
      Array.from({ length: jobs }, (_, i) => ({
        kind: 'noop',
        payload: { i },
        groupKey: `tenant-${i % keys}`,
      })),
    );
    let done = 0;
    let finish: () => void = () => {};
    const drained = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const worker = skiplock.worker({
      concurrency: 10,
      handleSignals: false,
      handlers: {
        noop: async () => {
          if (++done === jobs) finish();
        },
      },
    });
    const startedAt = performance.now();
    await worker.start();
    await drained;
    const seconds = (performance.now() - startedAt) / 1000;
    await worker.stop();
    return jobs / seconds;
  } finally {
    await skiplock.close();
    await skiplockSystem.destroy(target);
  }
}

export const groupedDrainScenario: Scenario = {
  id: 10,
  title: "A grouped queue's drain",
  async run(ctx: BenchContext) {
    const jobs = ctx.smoke ? 200 : ctx.quick ? 5000 : 20_000;
    const keys = ctx.smoke ? 20 : 1000;
    const n = (v: number) => v.toLocaleString('en-US');
    for (let run = 0; run < ctx.runs; run++) {
      for (const mode of MODES) {
        ctx.log(`  run ${run + 1}: ${mode}`);
        ctx.record(
          {
            scenario: "10. A grouped queue's drain",
            case: `${n(jobs)} jobs over ${n(keys)} group keys, 1 process, concurrency 10, ${mode}`,
            unit: 'jobs/s',
            system: 'skiplock',
          },
          await drainOnce(ctx, mode, jobs, keys),
        );
      }
    }
  },
};
