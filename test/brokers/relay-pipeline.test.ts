/**
 * A relay keeps up to `maxBatchesInFlight` batches between claim and removal:
 * it claims the next batch while earlier ones wait for the broker, never more
 * than the limit, and a batch the broker refuses goes back without losing or
 * holding up the others.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import type { RelayPublishResult, RelayTarget } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, streamMessages, until } from '../support/nats.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

/** `inner`, with every publish held until `open()`; counts the publishes under way and their peak. */
function gatedTarget(inner: RelayTarget) {
  let open: () => void = () => {};
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const state = { current: 0, peak: 0, calls: 0, open };
  const target: RelayTarget = {
    name: inner.name,
    connect: (timeoutMs) => inner.connect(timeoutMs),
    close: (timeoutMs) => inner.close(timeoutMs),
    async publish(jobs, timeoutMs) {
      state.calls++;
      state.current++;
      state.peak = Math.max(state.peak, state.current);
      try {
        await gate;
        return await inner.publish(jobs, timeoutMs);
      } finally {
        state.current--;
      }
    },
  };
  return { target, state };
}

const enqueue = (count: number) =>
  t.skiplock.enqueueMany(
    Array.from({ length: count }, (_, n) => ({ kind: 'a', payload: { n }, queue: 'relayed' })),
  );

describe('batches in flight', () => {
  it('claims the next batches while the broker holds earlier ones, up to maxBatchesInFlight', async () => {
    const stream = b.stream('relay_pipeline');
    const jobs = await enqueue(50);
    const { target, state } = gatedTarget(natsTarget({ servers: NATS_URL, stream }));
    b.relay({ target, queues: ['relayed'], batchSize: 10, maxBatchesInFlight: 3 }).start();
    await until(() => state.current === 3, 'three batches waiting for the broker');
    // The fourth batch stays queued while three are in flight.
    expect(await t.jobCount("status = 'running'")).toBe(30);
    expect(await t.jobCount("status = 'queued'")).toBe(20);
    expect(state.calls).toBe(3);
    state.open();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'every job relayed');
    expect(state.peak).toBe(3);
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id).sort()).toEqual(jobs.map((job) => job.id).sort());
  });

  it('publishes one batch after another with maxBatchesInFlight 1', async () => {
    const stream = b.stream('relay_pipeline');
    await enqueue(30);
    const { target, state } = gatedTarget(natsTarget({ servers: NATS_URL, stream }));
    b.relay({ target, queues: ['relayed'], batchSize: 10, maxBatchesInFlight: 1 }).start();
    await until(() => state.current === 1, 'a batch waiting for the broker');
    expect(await t.jobCount("status = 'running'")).toBe(10);
    state.open();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'every job relayed');
    expect(state.peak).toBe(1);
    expect((await streamMessages(stream)).length).toBe(30);
  });

  it('gives back a refused batch while others are in flight, and relays every job once', async () => {
    const stream = b.stream('relay_pipeline');
    const jobs = await enqueue(60);
    const inner = natsTarget({ servers: NATS_URL, stream });
    let refusals = 0;
    const target: RelayTarget = {
      name: inner.name,
      connect: (timeoutMs) => inner.connect(timeoutMs),
      close: (timeoutMs) => inner.close(timeoutMs),
      // The second batch is not acknowledged once: nothing acknowledged, the connection kept.
      async publish(batch, timeoutMs) {
        if (++refusals === 2) return { acknowledged: new Set<string>() };
        return inner.publish(batch, timeoutMs);
      },
    };
    const relay = b.relay({
      target,
      queues: ['relayed'],
      batchSize: 10,
      maxBatchesInFlight: 4,
      retryDelayMs: 50,
    });
    relay.start();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'every job relayed');
    expect(relay.metrics.released).toBe(10);
    expect(relay.metrics.published).toBe(60);
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id).sort()).toEqual(jobs.map((job) => job.id).sort());
  });
});

describe('a target that answers out of its contract', () => {
  /** A relay of queue `relayed` whose target's publish resolves with what `answer` makes of the batch. */
  const relayWith = (answer: (ids: string[]) => unknown) => {
    const target: RelayTarget = {
      name: 'custom',
      connect: async () => {},
      close: async () => {},
      publish: async (batch) => answer(batch.map((job) => job.id)) as never,
    };
    const relay = b.relay({ target, queues: ['relayed'], retryDelayMs: 50 });
    const errors: string[] = [];
    relay.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    return { relay, errors };
  };

  it('gives the batch back and says what it answered when it is not { acknowledged: Set, refused?: Map }', async () => {
    const [job] = await enqueue(1);
    const { relay, errors } = relayWith((ids) => ({ acknowledged: ids }));
    relay.start();
    await until(() => errors.length > 0 && relay.metrics.released > 0, 'the answer reported');
    await relay.stop();
    expect(errors[0]).toBe(
      `publish: custom: publish() resolved with { acknowledged: [ '${job!.id}' ] }, not { acknowledged: Set, refused?: Map }`,
    );
    expect(await t.query(`SELECT status, locked_by FROM ${t.jobs} WHERE id = $1`, [job!.id])).toEqual([
      { status: 'queued', locked_by: null },
    ]);
  });

  it('takes a job both acknowledged and refused as published, and ignores refused ids not in the batch', async () => {
    await enqueue(2);
    const { relay, errors } = relayWith(
      (ids) =>
        ({
          acknowledged: new Set(ids),
          refused: new Map([
            [ids[0]!, 'too large'],
            ['999999', 'not in the batch'],
          ]),
        }) satisfies RelayPublishResult,
    );
    relay.start();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'both jobs removed');
    expect(relay.metrics).toMatchObject({ published: 2, refused: 0, released: 0 });
    expect(errors).toEqual([]);
  });
});
