/**
 * The shared check of a broker-side worker's bounded stop: a handler that
 * ignores its signal is abandoned after the shutdown timeout, and its job comes
 * back to the next worker with the attempt uncharged.
 */
import { expect } from 'vitest';
import type { BrokerWorkerOptions } from '../../src/brokers/broker-worker.js';
import type { NatsWorker } from '../../src/brokers/nats.js';
import type { RabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { Job, JobMap, Skiplock } from '../../src/index.js';
import { until } from './nats.js';

/** The options the check gives the worker; the caller adds the broker's connection. */
export type AbandonedHandlerOptions = Pick<
  BrokerWorkerOptions<JobMap>,
  'queues' | 'handleSignals' | 'shutdownTimeoutMs' | 'handlers'
>;

/**
 * Starts a worker (through `start`, on queue `q`) whose handler never ends,
 * stops it after 300 ms of shutdown timeout, starts a second one, and expects
 * the job's one attempt to be charged once: `[1]` on each side.
 */
export async function expectAbandonedJobBackUncharged(
  skiplock: Skiplock,
  start: (options: AbandonedHandlerOptions) => Promise<NatsWorker | RabbitmqWorker>,
): Promise<void> {
  const options = { queues: ['q'], handleSignals: false };
  const first = await start({
    ...options,
    shutdownTimeoutMs: 300,
    handlers: { stuck: () => new Promise(() => {}) },
  });
  const begun: number[] = [];
  first.on('job:start', (job) => begun.push(job.attempts));
  await skiplock.enqueue('stuck', {}, { queue: 'q' });
  await until(() => begun.length === 1, 'the handler started');
  await first.stop();
  const attempts: number[] = [];
  await start({ ...options, handlers: { stuck: (j: Job) => void attempts.push(j.attempts) } });
  await until(() => attempts.length === 1, 'the job run by the next worker');
  expect([begun, attempts]).toEqual([[1], [1]]);
}
