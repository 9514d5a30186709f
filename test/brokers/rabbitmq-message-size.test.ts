/**
 * A RabbitMQ server that takes smaller messages than some job's (its
 * `max_message_size`, on a node of the test's own): the broker says its limit
 * only by closing the channel such a message came on. The relay and
 * rabbitmqWorker learn it from that close, then end such a job failed with the
 * reason, instead of sending it again and again; the other jobs go on.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { rabbitmqQueueName, rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { Job } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { until } from '../support/nats.js';
import { drainQueue, queueDepth } from '../support/rabbitmq.js';
import { maxMessageSizeEnv, type PrivateBroker, startPrivateRabbitmq } from './private-brokers.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

const MAX_MESSAGE_BYTES = 4096;

/** One node for the file, killed after its last test: a node boots in ~15 s on a loaded 2-core machine. */
const cleanups: (() => unknown)[] = [];
let server: Promise<PrivateBroker> | undefined;
function broker(): Promise<PrivateBroker> {
  server ??= startPrivateRabbitmq(
    { defer: (cleanup) => cleanups.push(cleanup) },
    { maxMessageBytes: MAX_MESSAGE_BYTES },
  );
  return server;
}
afterAll(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe(`RabbitMQ with max_message_size ${MAX_MESSAGE_BYTES}`, () => {
  it('the relay ends failed, saying why, a job whose message is larger; the rest of its batch is relayed', async () => {
    const { url } = await broker();
    const before = await t.skiplock.enqueue('small', { n: 1 }, { queue: 'relayed' });
    const big = await t.skiplock.enqueue(
      'big',
      { text: 'x'.repeat(MAX_MESSAGE_BYTES) },
      { queue: 'relayed' },
    );
    const after = await t.skiplock.enqueue('small', { n: 2 }, { queue: 'relayed' });
    const relay = b.relay({
      target: rabbitmqTarget({ url, queue: 'sized' }),
      queues: ['relayed'],
      publishTimeoutMs: 2000,
      retryDelayMs: 100,
    });
    const errors: [string, string][] = [];
    relay.on('error', (error, source) => errors.push([source, error.message]));
    relay.start();
    await until(async () => (await t.row(big.id))?.status === 'failed', 'the large job failed');
    await until(async () => (await t.jobCount('queue = $1', ['relayed'])) === 1, 'the small jobs relayed');
    const record = (await t.skiplock.getJob(big.id))!;
    expect([record.status, record.attempts, record.errors]).toEqual(['failed', 0, []]);
    expect(record.lastError).toMatch(
      new RegExp(
        `^rabbitmq refuses it: its message of \\d+ bytes is more than the RabbitMQ server's max_message_size \\(${MAX_MESSAGE_BYTES} bytes\\)$`,
      ),
    );
    expect(relay.metrics).toMatchObject({ refused: 1 });
    // The first send of the large message closed the channel: a publish error, then the refusal.
    expect(errors.filter(([source]) => source === 'publish').at(-1)).toEqual([
      'publish',
      `job ${big.id}: ${record.lastError}; it ended failed`,
    ]);
    const arrived = (await drainQueue(rabbitmqQueueName('sized', 'relayed'), url)).map((m) => m.job.id);
    expect(new Set(arrived)).toEqual(new Set([before.id, after.id]));
  }, 180_000);

  it('rabbitmqWorker writes a job back failed, after one run, when its retry message is larger', async () => {
    const { url } = await broker();
    const runs: number[] = [];
    const worker = rabbitmqWorker(t.skiplock, {
      url,
      queue: 'consumed',
      queues: ['wordy-q'],
      handlers: {
        // The error's history pushes the retry's message past the limit the first one fit under.
        wordy: (job: Job) => {
          runs.push(job.attempts);
          throw new Error('e'.repeat(MAX_MESSAGE_BYTES));
        },
      },
      handleSignals: false,
    });
    await b.started(worker);
    const relay = b.relay({ target: rabbitmqTarget({ url, queue: 'consumed' }), queues: ['wordy-q'] });
    relay.start();
    const job = await t.skiplock.enqueue('wordy', { text: 'x'.repeat(1000) }, { queue: 'wordy-q' });
    await until(async () => (await t.row(job.id))?.status === 'failed', 'the job written back failed');
    const record = (await t.skiplock.getJob(job.id))!;
    // The retry message closed the publishing channel, which told the limit; the delivery stayed held.
    expect([record.status, record.attempts, runs]).toEqual(['failed', 1, [1]]);
    expect(record.lastError).toMatch(
      new RegExp(
        `^its next message could not be published: its message of \\d+ bytes is more than the RabbitMQ server's max_message_size \\(${MAX_MESSAGE_BYTES} bytes\\)$`,
      ),
    );
    expect(record.errors.map((e) => [e.attempt, e.error.slice(0, 40)])).toEqual([
      [1, `Error: ${'e'.repeat(33)}`],
      [1, record.lastError!.slice(0, 40)],
    ]);
    expect(await drainQueue(rabbitmqQueueName('consumed', 'wordy-q'), url)).toEqual([]);
  }, 180_000);

  it('rabbitmqWorker learns the limit from a retry sent while it still sets up its other queues', async () => {
    const { url } = await broker();
    const queues = ['w0', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7'];
    // Waiting in the broker before the worker starts: the first queue's consumer gets it at once.
    const relay = b.relay({ target: rabbitmqTarget({ url, queue: 'setup' }), queues });
    relay.start();
    const wordy = await t.skiplock.enqueue('wordy', { text: 'x'.repeat(1000) }, { queue: 'w0' });
    const plain = await t.skiplock.enqueue('plain', {}, { queue: 'w7' });
    await until(async () => (await t.jobCount('id IN ($1, $2)', [wordy.id, plain.id])) === 0, 'both relayed');
    let [wordyRuns, plainRuns] = [0, 0];
    const worker = rabbitmqWorker(t.skiplock, {
      url,
      queue: 'setup',
      queues,
      handlers: {
        wordy: () => {
          wordyRuns++;
          throw new Error('e'.repeat(MAX_MESSAGE_BYTES));
        },
        plain: () => {
          plainRuns++;
        },
      },
      handleSignals: false,
    });
    await b.started(worker);
    await until(async () => (await t.row(wordy.id))?.status === 'failed', 'the job written back failed');
    await until(() => plainRuns === 1, 'the other queue consumed');
    expect(wordyRuns).toBe(1);
    expect((await t.skiplock.getJob(wordy.id))?.lastError).toMatch(/max_message_size \(4096 bytes\)$/);
  }, 180_000);

  it('rabbitmqWorker sends again, not hands back, the retries in flight when a message too large closed their channel', async () => {
    const { url } = await broker();
    const runs = new Map<string, number[]>();
    let running = 0;
    // Every first attempt ends at once, so that the normal retries are unconfirmed when the large one closes the channel.
    let release!: () => void;
    const together = new Promise<void>((resolve) => (release = resolve));
    const attempt = async (job: Job, error: Error) => {
      runs.set(job.id, [...(runs.get(job.id) ?? []), job.attempts]);
      running++;
      try {
        if (job.attempts > 1) return;
        if (runs.size === 21) release();
        await together;
        throw error;
      } finally {
        running--;
      }
    };
    const worker = rabbitmqWorker(t.skiplock, {
      url,
      queue: 'inflight',
      queues: ['q'],
      concurrency: 30,
      handlers: {
        // The retry waits 2 s in the delay queue; a message handed back would wait 1 s behind it.
        flaky: { backoff: 2000, handle: (job: Job) => attempt(job, new Error('small')) },
        wordy: (job: Job) => attempt(job, new Error('e'.repeat(MAX_MESSAGE_BYTES))),
      },
      handleSignals: false,
    });
    const relay = b.relay({ target: rabbitmqTarget({ url, queue: 'inflight' }), queues: ['q'] });
    relay.start();
    const flaky = (n: number) =>
      Array.from({ length: 10 }, (_, i) => ({ kind: 'flaky', payload: { i: n + i }, queue: 'q' }));
    const jobs = [
      ...(await t.skiplock.enqueueMany(flaky(0))),
      await t.skiplock.enqueue('wordy', { text: 'x'.repeat(1000) }, { queue: 'q' }),
      ...(await t.skiplock.enqueueMany(flaky(10))),
    ];
    await until(async () => (await t.jobCount()) === 0, 'all relayed');
    await b.started(worker);
    const wordy = jobs.find((job) => job.kind === 'wordy')!;
    const flakyIds = jobs.filter((job) => job.kind === 'flaky').map((job) => job.id);
    await until(
      async () => (await t.row(wordy.id))?.status === 'failed',
      'the large job written back failed',
    );
    await until(() => flakyIds.every((id) => runs.get(id)?.includes(2)), 'every small job ran its retry');
    const name = rabbitmqQueueName('inflight', 'q');
    await until(
      async () =>
        running === 0 && (await queueDepth(name, url)) + (await queueDepth(`${name}.delay`, url)) === 0,
      'nothing left to deliver or running',
    );
    expect(flakyIds.map((id) => runs.get(id))).toEqual(flakyIds.map(() => [1, 2]));
    expect(runs.get(wordy.id)).toEqual([1]);
  }, 180_000);

  // Last: it restarts the file's node.
  it('a limit learned is forgotten when the broker restarts, which may have raised it', async () => {
    const server = await broker();
    const runs: string[] = [];
    const worker = rabbitmqWorker(t.skiplock, {
      url: server.url,
      queue: 'forget',
      queues: ['q'],
      handlers: {
        wordy: () => {
          runs.push('wordy');
          throw new Error('e'.repeat(MAX_MESSAGE_BYTES));
        },
        medium: (job: Job) => {
          runs.push(`medium:${job.attempts}`);
          if (job.attempts === 1) throw new Error('m'.repeat(MAX_MESSAGE_BYTES - 1000));
        },
      },
      handleSignals: false,
    });
    await b.started(worker);
    const relay = b.relay({
      target: rabbitmqTarget({ url: server.url, queue: 'forget' }),
      queues: ['q'],
      retryDelayMs: 200,
    });
    relay.start();
    const wordy = await t.skiplock.enqueue('wordy', { text: 'x'.repeat(1000) }, { queue: 'q' });
    await until(async () => (await t.row(wordy.id))?.status === 'failed', 'the worker learned the limit');
    await server.stop('SIGTERM');
    await server.start(maxMessageSizeEnv(1024 * 1024));
    const medium = await t.skiplock.enqueue('medium', { text: 'x'.repeat(1000) }, { queue: 'q' });
    // The worker and the relay connect again by themselves, after pauses of up to 10 s.
    await until(() => runs.includes('medium:2'), 'the retry, larger than the old limit, ran', 90_000);
    expect(runs).toEqual(['wordy', 'medium:1', 'medium:2']);
    expect(await t.row(medium.id)).toBeUndefined();
  }, 240_000);
});
