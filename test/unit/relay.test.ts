import { describe, expect, it } from 'vitest';
import { natsSubject, natsTarget, natsWorker } from '../../src/brokers/nats.js';
import { rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import { createRelay, Skiplock } from '../../src/index.js';
import { brokerMessageId, relayMessageId, relayNamespace } from '../../src/relay/message.js';

describe('relayed message ids', () => {
  it('differ by cluster, database and schema, and are stable for the same ones', () => {
    const namespaces = [
      relayNamespace('7714381086672762994', 'app', 'skiplock'),
      relayNamespace('7714381086672762995', 'app', 'skiplock'),
      relayNamespace('7714381086672762994', 'billing', 'skiplock'),
      relayNamespace('7714381086672762994', 'app', 'skiplock_2'),
      // The separator keeps `ab`+`c` apart from `a`+`bc`.
      relayNamespace('7714381086672762994', 'appskiplock', ''),
    ];
    expect(new Set(namespaces).size).toBe(5);
    expect(relayNamespace('7714381086672762994', 'app', 'skiplock')).toBe(namespaces[0]);
    expect(namespaces[0]).toMatch(/^[0-9a-f]{16}$/);
  });

  it('are the job id and lease number under the namespace, then one per hop', () => {
    const messageId = relayMessageId('0123456789abcdef', '42', '3', new Date('2026-12-07T12:00:00.123Z'));
    expect(messageId).toBe('0123456789abcdef.42.3.1796644800123');
    expect(brokerMessageId({ messageId } as never)).toBe(messageId);
    expect(brokerMessageId({ messageId, hop: 2 } as never)).toBe(`${messageId}.2`);
  });
});

describe('NATS subjects', () => {
  it('escape what a subject token cannot hold', () => {
    expect(natsSubject('jobs', 'emails')).toBe('jobs.emails');
    expect(natsSubject('jobs', 'a.b *>c')).toBe('jobs.a%2Eb%20%2A%3Ec');
    expect(natsSubject('jobs', 'é')).toBe('jobs.%C3%A9');
  });
});

describe('relay options', () => {
  const skiplock = new Skiplock({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
  const target = natsTarget({ servers: 'nats://127.0.0.1:1', stream: 'jobs' });

  it('are refused naming the field, nothing started', () => {
    expect(() => createRelay(skiplock, { target, batchSize: 0 })).toThrow(/relay\.batchSize/);
    expect(() => createRelay(skiplock, { target, queues: [] })).toThrow(/relay\.queues/);
    for (const maxBatchesInFlight of [0, 65, 1.5])
      expect(() => createRelay(skiplock, { target, maxBatchesInFlight })).toThrow(
        /relay\.maxBatchesInFlight/,
      );
    expect(() => createRelay(skiplock, { target, queues: [''] })).toThrow(/relay\.queues\[0\]/);
    expect(() => createRelay(skiplock, { target: {} as never })).toThrow(/relay\.target/);
    expect(() =>
      createRelay(skiplock, { target, visibilityTimeoutMs: 10_000, publishTimeoutMs: 6000 }),
    ).toThrow(/relay\.publishTimeoutMs: must be at most half of visibilityTimeoutMs/);
    // Only visibilityTimeoutMs given: it is the one named, against publishTimeoutMs's default.
    expect(() => createRelay(skiplock, { target, visibilityTimeoutMs: 15_000 })).toThrow(
      'invalid relay.visibilityTimeoutMs: must be at least twice publishTimeoutMs (10000 ms, its default)',
    );
    expect(() => natsTarget({ servers: 'nats://h', stream: 'a.b' })).toThrow(/natsTarget\.stream/);
  });

  it('targets refuse a misspelt option, no server and a duplicate window past its range, naming each', () => {
    expect(() => natsTarget({ servers: 'nats://h', stream: 'jobs', subjectPrefx: 'x' } as never)).toThrow(
      'invalid natsTarget.subjectPrefx: unknown option',
    );
    expect(() => rabbitmqTarget({ url: 'amqp://h', qeue: 'x' } as never)).toThrow(
      'invalid rabbitmqTarget.qeue: unknown option',
    );
    for (const servers of [[], '', ['  ']])
      expect(() => natsTarget({ servers, stream: 'jobs' })).toThrow(
        'invalid natsTarget.servers: must name at least one server',
      );
    expect(() => natsTarget({ servers: 'nats://h', stream: 'jobs', duplicateWindowMs: 1e300 })).toThrow(
      /^invalid natsTarget\.duplicateWindowMs: must be an integer in 1000…9007199254$/,
    );
  });

  it('emits relay:stop once, and not for a relay never started', async () => {
    const stops: string[] = [];
    const never = createRelay(skiplock, {
      target: natsTarget({ servers: 'nats://127.0.0.1:1', stream: 'jobs' }),
    });
    never.on('relay:stop', () => stops.push('never'));
    await never.stop();
    await never.stop();
    expect(stops).toEqual([]);
  });
});

describe('broker-side worker options', () => {
  const skiplock = new Skiplock({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
  const handlers = { greet: () => {} };
  const nats = { servers: 'nats://127.0.0.1:1', stream: 'jobs', handlers };
  const rabbitmq = { url: 'amqp://127.0.0.1:1', handlers };

  it('refuse an unknown option, a handleSignals that is no boolean and a bad workerId, naming each', () => {
    expect(() => natsWorker(skiplock, { ...nats, concurency: 5 } as never)).toThrow(
      'invalid natsWorker.concurency: unknown option',
    );
    expect(() => natsWorker(skiplock, { ...nats, handlers: {} })).toThrow(
      'invalid natsWorker.handlers: must name at least one kind',
    );
    expect(() => rabbitmqWorker(skiplock, { ...rabbitmq, stream: 'jobs' } as never)).toThrow(
      'invalid rabbitmqWorker.stream: unknown option',
    );
    expect(() => natsWorker(skiplock, { ...nats, handleSignals: 'no' } as never)).toThrow(
      'invalid natsWorker.handleSignals: must be a boolean',
    );
    for (const workerId of [5, '', 'w'.repeat(201)])
      expect(() => rabbitmqWorker(skiplock, { ...rabbitmq, workerId } as never)).toThrow(
        'invalid rabbitmqWorker.workerId: must be a string of 1…200 characters',
      );
  });

  it('take every option of their own and the shared ones', () => {
    const worker = natsWorker(skiplock, {
      ...nats,
      subjectPrefix: 'jobs',
      duplicateWindowMs: 60_000,
      ackWaitMs: 5000,
      queues: ['q'],
      concurrency: 2,
      jobTimeoutMs: 1000,
      shutdownTimeoutMs: 1000,
      handleSignals: false,
      workerId: 'w1',
    });
    expect(worker.id).toBe('w1');
    expect(rabbitmqWorker(skiplock, { ...rabbitmq, queue: 'jobs', workerId: 'w2' }).id).toBe('w2');
  });
});
