/**
 * Jobs of one group key reach the broker in order, with two relays sharing the
 * queue: a relay claims a key's job only when no job of the key ahead of it is
 * queued or held by another relay.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import type { Relay } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, streamMessages, until } from '../support/nats.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

const KEYS = 10;
const PER_KEY = 50;

describe('group keys through the relay', () => {
  it("two relays publish each key's 50 jobs in order (10 keys, small batches)", async () => {
    const stream = b.stream('relay_groups');
    // Interleaved keys, in several transactions, so that batches cut across keys.
    for (let round = 0; round < 5; round++) {
      await t.skiplock.enqueueMany(
        Array.from({ length: KEYS * (PER_KEY / 5) }, (_, i) => {
          const n = round * (PER_KEY / 5) + Math.floor(i / KEYS);
          return { kind: 'ordered', payload: { n }, queue: 'grouped', groupKey: `key-${i % KEYS}` };
        }),
      );
    }
    // A job without a key is not held back by anything.
    await t.skiplock.enqueue('loose', {}, { queue: 'grouped' });
    const relays: Relay[] = [];
    for (let i = 0; i < 2; i++) {
      const relay = b.relay({
        target: natsTarget({ servers: NATS_URL, stream }),
        queues: ['grouped'],
        batchSize: 7,
        lingerMs: 5,
      });
      relays.push(relay);
      relay.start();
    }
    await until(async () => (await t.jobCount("queue = 'grouped'")) === 0, 'every job relayed', 120_000);
    const messages = await streamMessages(stream);
    expect(messages.length).toBe(KEYS * PER_KEY + 1);
    expect(new Set(messages.map((m) => m.job.id)).size).toBe(KEYS * PER_KEY + 1);
    const byKey = new Map<string, number[]>();
    for (const { job } of messages) {
      if (job.groupKey === undefined) continue;
      byKey.set(job.groupKey, [...(byKey.get(job.groupKey) ?? []), (job.payload as { n: number }).n]);
    }
    expect([...byKey.keys()].sort()).toEqual(Array.from({ length: KEYS }, (_, k) => `key-${k}`).sort());
    const inOrder = Array.from({ length: PER_KEY }, (_, n) => n);
    for (const [key, ns] of byKey) expect(ns, key).toEqual(inOrder);
    // Both relays took part.
    expect(relays.every((relay) => relay.metrics.published > 0)).toBe(true);
  }, 180_000);
});
