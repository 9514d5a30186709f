/**
 * The broker goes down mid-stream and comes back: a relay moving a stream of
 * jobs to a broker server of the test's own (NATS SIGKILLed, RabbitMQ shut
 * down, then started again on the same port and store) recovers by itself,
 * and every job arrives. NATS
 * drops a batch published again under the same message id, so the stream
 * holds each job once; RabbitMQ may hold a repeat (a batch the broker stored
 * but whose confirms were lost with the connection), always under the job's
 * message id, which consumers deduplicate by. A rabbitmqWorker whose broker
 * restarts connects again by itself and handles every job.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import { rabbitmqQueueName, rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { Job, RelayedJob, RelayTarget } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { streamMessages, until } from '../support/nats.js';
import { drainQueue } from '../support/rabbitmq.js';
import { type PrivateBroker, startPrivateNats, startPrivateRabbitmq } from './private-brokers.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

const QUEUE = 'relayed';
/** Jobs enqueued before the crash, while the broker is down, and after it is back. */
const WAVE = 100;

const brokers = [
  {
    name: 'NATS',
    start: startPrivateNats,
    stop: 'SIGKILL' as const,
    target: (url: string) => natsTarget({ servers: url, stream: 'restarts' }),
    async messages(url: string) {
      return (await streamMessages('restarts', url)).map((m) => ({ job: m.job, id: m.msgId }));
    },
    repeats: false,
  },
  {
    name: 'RabbitMQ',
    start: startPrivateRabbitmq,
    // A clean restart: a single node's quorum queue SIGKILLed does not elect its leader again (RabbitMQ 3.10).
    stop: 'SIGTERM' as const,
    target: (url: string) => rabbitmqTarget({ url, queue: 'restarts' }),
    async messages(url: string) {
      const messages = await drainQueue(rabbitmqQueueName('restarts', QUEUE), url);
      return messages.map((m) => ({ job: m.job, id: m.messageId }));
    },
    repeats: true,
  },
] satisfies {
  name: string;
  start: typeof startPrivateNats;
  stop: 'SIGKILL' | 'SIGTERM';
  target: (url: string) => RelayTarget;
  messages: (url: string) => Promise<{ job: RelayedJob; id: string | undefined }[]>;
  repeats: boolean;
}[];

describe.each(brokers)('$name restarting under a relay', (broker) => {
  it('the relay recovers by itself and every job arrives', async () => {
    const server: PrivateBroker = await broker.start(t);
    const enqueue = (wave: number) =>
      t.skiplock.enqueueMany(
        Array.from({ length: WAVE }, (_, n) => ({ kind: 'a', payload: { wave, n }, queue: QUEUE })),
      );
    const ids = (await enqueue(0)).map((job) => job.id);
    const relay = b.relay({
      target: broker.target(server.url),
      queues: [QUEUE],
      batchSize: 10,
      publishTimeoutMs: 1000,
      retryDelayMs: 200,
    });
    const failures: string[] = [];
    relay.on('error', (_error, source) => failures.push(source));
    relay.start();
    await until(() => relay.metrics.published >= 30, 'a stream of batches relayed');

    await server.stop(broker.stop);
    ids.push(...(await enqueue(1)).map((job) => job.id));
    await until(() => failures.includes('publish'), 'a publish failed while the broker is down');
    const publishedWhileDown = relay.metrics.published;
    await server.start();
    ids.push(...(await enqueue(2)).map((job) => job.id));
    await until(async () => (await t.jobCount()) === 0, 'every job relayed', 120_000);

    expect(relay.metrics.published).toBeGreaterThan(publishedWhileDown);
    const messages = await broker.messages(server.url);
    const arrived = [...new Set(messages.map((m) => m.job.id))].sort();
    expect(arrived).toEqual([...ids].sort());
    // A repeat carries its job's message id, as the first copy does.
    expect(messages.filter((m) => m.id !== m.job.messageId)).toEqual([]);
    const repeats = messages.length - arrived.length;
    console.log(`[broker-restart] ${broker.name}: ${ids.length} jobs, ${repeats} repeats`);
    if (!broker.repeats) expect(repeats).toBe(0);
  }, 240_000);
});

describe('RabbitMQ restarting under a rabbitmqWorker', () => {
  it('the worker connects again by itself and every job is handled', async () => {
    const server = await startPrivateRabbitmq(t);
    const handled = new Set<string>();
    const worker = rabbitmqWorker(t.skiplock, {
      url: server.url,
      queue: 'consumed',
      queues: [QUEUE],
      handlers: {
        a: (job: Job) => {
          handled.add(job.id);
        },
      },
      handleSignals: false,
    });
    const failures: string[] = [];
    worker.on('error', (_error, source) => failures.push(source));
    await b.started(worker);
    const relay = b.relay({
      target: rabbitmqTarget({ url: server.url, queue: 'consumed' }),
      queues: [QUEUE],
      publishTimeoutMs: 1000,
      retryDelayMs: 200,
    });
    relay.start();
    const enqueue = async (wave: number) =>
      (
        await t.skiplock.enqueueMany(
          Array.from({ length: WAVE / 2 }, (_, n) => ({ kind: 'a', payload: { wave, n }, queue: QUEUE })),
        )
      ).map((job) => job.id);
    const ids = await enqueue(0);
    await until(() => ids.every((id) => handled.has(id)), 'the first jobs handled');

    await server.stop('SIGTERM');
    await until(() => failures.includes('consume'), 'the worker to report the lost connection');
    ids.push(...(await enqueue(1)));
    await server.start();
    ids.push(...(await enqueue(2)));
    await until(() => ids.every((id) => handled.has(id)), 'every job handled', 120_000);
    expect([...handled].sort()).toEqual([...ids].sort());
  }, 240_000);
});
