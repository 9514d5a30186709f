/**
 * Scenario 1, enqueue: one job per call (sequential, and 16 callers at once)
 * and one bulk call of 1,000, of 20,000 and of 100,000 jobs. Each call starts
 * from an empty queue. A call of 1,000 lasts about 10 ms, as long as a burst
 * of the machine's other work, so each run times five of them.
 */
import { type BenchContext, payloads, type Scenario, withTarget } from './scenario.js';

const PARALLEL_CALLERS = 16;
/** Jobs per bulk call (all three in every mode). */
export const BULK_SIZES = [1_000, 20_000, 100_000] as const;
/** Timed calls per run of a bulk size: five of the short calls, one of the long ones. */
const callsPerRun = (size: number): number => (size <= 1_000 ? 5 : 1);

export const enqueueScenario: Scenario = {
  id: 1,
  title: 'Enqueue',
  async run(ctx: BenchContext) {
    const single = ctx.smoke ? 100 : ctx.quick ? 500 : 2_000;
    const parallel = ctx.smoke ? 400 : ctx.quick ? 2_000 : 8_000;
    const scenario = '1. Enqueue';
    const unit = 'jobs/s';
    for (const system of ctx.systems) {
      await withTarget(ctx, system, 'enqueue', async (client) => {
        // Untimed calls warm the connections, prepared statements and both code paths.
        await client.enqueueOne({ i: -1 });
        await client.enqueueMany(payloads(BULK_SIZES[0]));
        for (let run = 0; run < ctx.runs; run++) {
          await client.purge();
          let start = performance.now();
          for (let i = 0; i < single; i++) await client.enqueueOne({ i });
          ctx.record(
            { scenario, case: `one per call, sequential (${single})`, unit, system: system.name },
            rate(single, start),
          );

          await client.purge();
          let next = 0;
          start = performance.now();
          await Promise.all(
            Array.from({ length: PARALLEL_CALLERS }, async () => {
              while (next < parallel) await client.enqueueOne({ i: next++ });
            }),
          );
          ctx.record(
            {
              scenario,
              case: `one per call, ${PARALLEL_CALLERS} in parallel (${parallel})`,
              unit,
              system: system.name,
            },
            rate(parallel, start),
          );

          for (const size of BULK_SIZES) {
            for (let call = 0; call < callsPerRun(size); call++) {
              await client.purge();
              const batch = payloads(size);
              start = performance.now();
              await client.enqueueMany(batch);
              ctx.record(
                {
                  scenario,
                  case: `bulk, one call of ${size.toLocaleString('en-US')}`,
                  unit,
                  system: system.name,
                  tag: `enqueue.bulk.${size}`,
                },
                rate(size, start),
              );
            }
          }
        }
        ctx.log(`  enqueue: ${system.name} done`);
      });
    }
  },
};

function rate(jobs: number, startedAt: number): number {
  return jobs / ((performance.now() - startedAt) / 1000);
}
