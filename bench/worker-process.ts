/**
 * A forked worker process of the drain scenario. The parent sends `init`
 * (which system, where, how many handlers), waits for every child's `ready`,
 * then sends `go` to all at once and `stop` when the queue is empty. The
 * child reports how many handlers ran, at most every 10 ms.
 */
import { systemByName } from './systems/index.js';
import type { RunningWorker, SystemClient, Target } from './systems/system.js';

/** Messages from the parent. */
export type ToWorker =
  | { type: 'init'; target: Target; concurrency: number }
  | { type: 'go' }
  | { type: 'stop' };
/** Messages to the parent. */
export type FromWorker = { type: 'ready' } | { type: 'count'; count: number } | { type: 'stopped' };

const REPORT_INTERVAL_MS = 10;

let client: SystemClient | undefined;
let worker: RunningWorker | undefined;
let concurrency = 1;
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
    client = await systemByName(message.target.system).attach(message.target);
    send({ type: 'ready' });
  } else if (message.type === 'go') {
    worker = await client!.startWorker({
      concurrency,
      handler: () => {
        count++;
      },
    });
  } else {
    await worker?.stop();
    await client?.close();
    clearInterval(reporter);
    send({ type: 'stopped' });
    process.disconnect();
  }
}
