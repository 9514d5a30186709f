/**
 * A forked worker process of the drain scenarios. The parent sends `init`
 * (which system, where, how many handlers), waits for every child's `ready`,
 * then sends `go` to all at once and `stop` when the queue is empty. The
 * child reports how many handlers ran, at most every 10 ms, and with
 * `memory` its resident set size every 500 ms from `go` on (scenario 8).
 */
import { systemByName } from './systems/index.js';
import type { RunningWorker, SkiplockTuning, SystemClient, Target } from './systems/system.js';

/** Messages from the parent. */
export type ToWorker =
  | { type: 'init'; target: Target; concurrency: number; tuning?: SkiplockTuning; memory?: boolean }
  | { type: 'go' }
  | { type: 'stop' };
/** Messages to the parent. */
export type FromWorker =
  | { type: 'ready' }
  | { type: 'count'; count: number }
  | { type: 'memory'; rss: number; count: number }
  | { type: 'stopped' };

const REPORT_INTERVAL_MS = 10;
/** How often the resident set size is sampled when the parent asks for it. */
export const MEMORY_SAMPLE_MS = 500;

let client: SystemClient | undefined;
let worker: RunningWorker | undefined;
let concurrency = 1;
let tuning: SkiplockTuning | undefined;
let sampleMemory = false;
let sampler: NodeJS.Timeout | undefined;
let count = 0;
let reported = 0;

function send(message: FromWorker): void {
  process.send?.(message);
}

const reporter = setInterval(() => {
  if (count !== reported) {
    reported = count;
    send({ type: 'count', count });
  }
}, REPORT_INTERVAL_MS);

process.on('message', (message: ToWorker) => {
  void handle(message).catch((error: unknown) => {
    console.error('bench worker process:', error);
    process.exit(1);
  });
});
// An orphan must not keep draining someone else's queue.
process.on('disconnect', () => process.exit(0));

async function handle(message: ToWorker): Promise<void> {
  if (message.type === 'init') {
    concurrency = message.concurrency;
    tuning = message.tuning;
    sampleMemory = message.memory ?? false;
    client = await systemByName(message.target.system).attach(message.target);
    send({ type: 'ready' });
  } else if (message.type === 'go') {
    if (sampleMemory) {
      const sample = () => send({ type: 'memory', rss: process.memoryUsage().rss, count });
      sample();
      sampler = setInterval(sample, MEMORY_SAMPLE_MS);
    }
    worker = await client!.startWorker({
      concurrency,
      ...(tuning ? { tuning } : {}),
      handler: () => {
        count++;
      },
    });
  } else {
    clearInterval(sampler);
    await worker?.stop();
    await client?.close();
    clearInterval(reporter);
    send({ type: 'stopped' });
    process.disconnect();
  }
}
