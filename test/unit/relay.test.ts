import { describe, expect, it } from 'vitest';
import { natsSubject, natsTarget } from '../../src/brokers/nats.js';
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
    const messageId = relayMessageId('0123456789abcdef', '42', '3');
    expect(messageId).toBe('0123456789abcdef.42.3');
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
});
