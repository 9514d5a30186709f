/**
 * Scenario 8, memory (skiplock): one forked worker process with the default
 * settings (concurrency 10) drains 1,000,000 no-op jobs (quick: 200,000),
 * enqueued in calls of 20,000 before the start. The process samples its
 * resident set size every 500 ms; the report shows it at 10 % of the drain
 * (warm-up done), its maximum and at the end, and of the samples from 10 % on
 * both the spread max / min − 1 and the band ± (max − min) / (max + min): the
 * smallest ± band around one level that holds every sample.
 */
import { skiplockSystem } from '../systems/skiplock.js';
import { drainOnce, type MemorySample } from './drain.js';
import { type BenchContext, openTarget, type Scenario } from './scenario.js';

const ENQUEUE_CHUNK = 20_000;
/** Share of the drain counted as warm-up. */
const WARM_UP = 0.1;

export const memoryScenario: Scenario = {
  id: 8,
  title: 'Memory',
  async run(ctx: BenchContext) {
    const jobs = ctx.smoke ? 40_000 : ctx.quick ? 200_000 : 1_000_000;
    const shape = { processes: 1, concurrency: 10 };
    const scenario = '8. Memory';
    const label = `1 worker process (defaults, concurrency 10) draining ${jobs.toLocaleString('en-US')} no-op jobs`;
    const open = await openTarget(ctx, skiplockSystem, 'memory');
    try {
      for (let run = 0; run < ctx.runs; run++) {
        const samples: MemorySample[] = [];
        const rate = await drainOnce(open.client, open.target, jobs, shape, {
          enqueueChunk: ENQUEUE_CHUNK,
          onMemory: (_, sample) => samples.push(sample),
        });
        const warm = samples.filter((s) => s.count >= jobs * WARM_UP);
        const mb = (bytes: number) => bytes / 2 ** 20;
        const rss = warm.map((s) => s.rss);
        const atWarm = warm[0]?.rss ?? Number.NaN;
        const max = Math.max(...samples.map((s) => s.rss));
        const end = samples.at(-1)?.rss ?? Number.NaN;
        const [low, high] = [Math.min(...rss), Math.max(...rss)];
        const spread = rss.length >= 2 ? (high / low - 1) * 100 : Number.NaN;
        const band = rss.length >= 2 ? ((high - low) / (high + low)) * 100 : Number.NaN;
        const rec = (kase: string, unit: string, value: number, tag?: string) =>
          ctx.record(
            { scenario, case: `${label}: ${kase}`, unit, system: 'skiplock', ...(tag ? { tag } : {}) },
            value,
          );
        rec('drain rate', 'jobs/s', rate);
        rec('RSS at 10 % of the drain', 'MB (lower is better)', mb(atWarm));
        rec('RSS max', 'MB (lower is better)', mb(max));
        rec('RSS at the end', 'MB (lower is better)', mb(end));
        rec(
          'RSS spread from 10 % on (max / min − 1, samples every 500 ms)',
          '% (lower is better)',
          spread,
          'memory.spread',
        );
        rec(
          `RSS band from 10 % on (± (max − min) / (max + min), around the midpoint)`,
          '% (lower is better)',
          band,
          'memory.band',
        );
        ctx.log(
          `  memory run ${run + 1}: ${Math.round(rate)} jobs/s; RSS ${mb(atWarm).toFixed(1)} MB at 10 %, max ${mb(max).toFixed(1)}, end ${mb(end).toFixed(1)}; spread ${spread.toFixed(1)} %, band ± ${band.toFixed(1)} %`,
        );
      }
    } finally {
      await open.close();
    }
  },
};
