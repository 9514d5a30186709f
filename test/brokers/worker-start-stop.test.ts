/**
 * A broker-side worker's start and stop racing each other: two starts at once
 * share one connection, and a stop while a start is under way closes what
 * that start opened (no socket to the broker, no signal handler left).
 */
import { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { BrokerWorkerOptions } from '../../src/brokers/broker-worker.js';
import { natsWorker } from '../../src/brokers/nats.js';
import { rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { JobMap } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, until } from '../support/nats.js';
import { RABBITMQ_URL } from '../support/rabbitmq.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

/** Open sockets of this process to `port`. */
function socketsTo(port: number): number {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.filter((h) => h instanceof Socket && h.remotePort === port && !h.destroyed).length;
}

const options: BrokerWorkerOptions<JobMap> = { queues: ['q'], handlers: { greet: () => {} } };

const brokers = [
  {
    name: 'natsWorker',
    port: Number(new URL(NATS_URL).port || 4222),
    make: (handleSignals: boolean) =>
      natsWorker(t.skiplock, { ...options, servers: NATS_URL, stream: b.stream('startstop'), handleSignals }),
  },
  {
    name: 'rabbitmqWorker',
    port: Number(new URL(RABBITMQ_URL).port || 5672),
    make: (handleSignals: boolean) =>
      rabbitmqWorker(t.skiplock, {
        ...options,
        url: RABBITMQ_URL,
        queue: b.rabbitmqPrefix(['q'], 'startstop'),
        handleSignals,
      }),
  },
];

describe.each(brokers)('$name start and stop', ({ port, make }) => {
  it('two start() calls at once share one connection, which stop() closes', async () => {
    const before = socketsTo(port);
    const worker = make(false);
    const [first, second] = [worker.start(), worker.start()];
    expect(second).toBe(first);
    await first;
    expect(socketsTo(port)).toBe(before + 1);
    await worker.stop();
    await until(() => socketsTo(port) === before, 'the connection closed');
  });

  it('stop() while start() is under way waits for it and closes what it opened; no signal handler stays', async () => {
    const sockets = socketsTo(port);
    const handlers = process.listenerCount('SIGTERM');
    const worker = make(true);
    const starting = worker.start();
    const stopped: string[] = [];
    worker.on('worker:stop', () => stopped.push('event'));
    await worker.stop();
    stopped.push('stop');
    await starting;
    expect(stopped).toEqual(['event', 'stop']);
    expect(process.listenerCount('SIGTERM')).toBe(handlers);
    await until(() => socketsTo(port) === sockets, 'the connection the start opened closed');
    // Stopped for good: a later start opens nothing.
    await worker.start();
    expect(socketsTo(port)).toBe(sockets);
  });
});
