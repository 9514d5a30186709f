import { describe, expect, it } from 'vitest';
import {
  type RabbitmqWorker,
  rabbitmqQueueName,
  rabbitmqTarget,
  rabbitmqWorker,
} from '../../src/brokers/rabbitmq.js';
import type { Job } from '../../src/index.js';
import { expectAbandonedJobBackUncharged } from '../support/abandoned-handler.js';
import { useTestDatabase } from '../support/fixture.js';
import { gate } from '../support/gate.js';
import { until } from '../support/nats.js';
import { startNetProxy } from '../support/net-proxy.js';
import { deleteQueues, drainQueue, RABBITMQ_URL } from '../support/rabbitmq.js';
import { rolledBack } from '../support/transaction.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

/** Relays skiplock queue `queue` to RabbitMQ under a new prefix; returns the prefix. */
function relayed(queue: string): string {
  const prefix = b.rabbitmqPrefix([queue]);
  b.relay({ target: rabbitmqTarget({ url: RABBITMQ_URL, queue: prefix }), queues: [queue] }).start();
  return prefix;
}

const started = (worker: RabbitmqWorker) => b.started(worker);

describe('the relay to RabbitMQ', () => {
  it('publishes exactly the committed jobs, persistent, with the job message id as messageId', async () => {
    const committed = await t.skiplock.enqueueMany([
      { kind: 'a', payload: { n: 1 }, queue: 'relayed' },
      { kind: 'b', payload: { n: 2 }, queue: 'relayed' },
    ]);
    await rolledBack(t.db.pool, (client) =>
      t.skiplock.enqueue('rolled_back', {}, { queue: 'relayed', client }),
    );
    const prefix = relayed('relayed');
    await until(async () => (await t.jobCount()) === 0, 'relayed jobs removed');
    const messages = await drainQueue(rabbitmqQueueName(prefix, 'relayed'));
    expect(messages.map((m) => [m.job.id, m.job.kind, m.job.payload])).toEqual([
      [committed[0]!.id, 'a', { n: 1 }],
      [committed[1]!.id, 'b', { n: 2 }],
    ]);
    expect(messages.map((m) => m.messageId)).toEqual(messages.map((m) => m.job.messageId));
  });

  it('ends failed, saying why, a job whose queue name RabbitMQ cannot hold, and goes on relaying the others', async () => {
    const long = 'q'.repeat(240);
    const prefix = b.rabbitmqPrefix(['relayed']);
    const relay = b.relay({
      target: rabbitmqTarget({ url: RABBITMQ_URL, queue: prefix }),
      queues: ['relayed', long],
    });
    const errors: string[] = [];
    relay.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    const refused = await t.skiplock.enqueue('a', {}, { queue: long });
    const kept = await t.skiplock.enqueue('a', { n: 1 }, { queue: 'relayed' });
    relay.start();
    await until(
      async () => (await t.row(refused.id))?.status === 'failed',
      'the job of the long queue failed',
    );
    await until(async () => (await t.jobCount('id = $1', [kept.id])) === 0, 'the other job relayed');
    const bytes = Buffer.byteLength(`${prefix}.${long}.delay`);
    const reason = `rabbitmq refuses it: its queue's RabbitMQ name with ".delay" is ${bytes} bytes, more than the 255 AMQP allows`;
    expect((await t.skiplock.getJob(refused.id))?.lastError).toBe(reason);
    expect(errors).toEqual([`publish: job ${refused.id}: ${reason}; it ended failed`]);
    expect((await drainQueue(rabbitmqQueueName(prefix, 'relayed'))).map((m) => m.job.id)).toEqual([kept.id]);
  });

  it('stops within its bounds when the broker stops answering mid-batch, also while it declares a queue; the batch is given back', async () => {
    const prefix = b.rabbitmqPrefix(['relayed', 'later']);
    await b.expectBoundedStopOnDeafBroker(RABBITMQ_URL, (url) => rabbitmqTarget({ url, queue: prefix }));
  });
});

describe('the relay to RabbitMQ, connecting', () => {
  it('stops within a few seconds while a broker that never answers holds its connect', async () => {
    const prefix = b.rabbitmqPrefix(['relayed']);
    await b.expectBoundedStopWhileConnecting(RABBITMQ_URL, (url) => rabbitmqTarget({ url, queue: prefix }));
  });
});

describe('rabbitmqWorker', () => {
  it('refuses a queue prefix that makes names RabbitMQ reserves (amq.), target and worker alike', () => {
    for (const queue of ['amq', 'amq.jobs']) {
      expect(() => rabbitmqTarget({ url: RABBITMQ_URL, queue })).toThrow(
        expect.objectContaining({ field: 'rabbitmqTarget.queue' }),
      );
      expect(() =>
        rabbitmqWorker(t.skiplock, { url: RABBITMQ_URL, queue, handlers: { a: () => {} } }),
      ).toThrow(expect.objectContaining({ field: 'rabbitmqWorker.queue' }));
    }
  });

  it('refuses a queue whose RabbitMQ name would be longer than AMQP allows, naming it', () => {
    const make = () =>
      rabbitmqWorker(t.skiplock, {
        url: RABBITMQ_URL,
        queue: 'skiplock',
        queues: ['short', 'q'.repeat(250)],
        handlers: { a: () => {} },
      });
    expect(make).toThrow(
      expect.objectContaining({
        field: 'rabbitmqWorker.queues[1]',
        message: expect.stringContaining('is 265 bytes, more than the 255 AMQP allows'),
      }),
    );
  });

  it('stops within its bounds when the broker stops answering', async () => {
    const prefix = relayed('q');
    await b.expectWorkerBoundedStopOnDeafBroker(RABBITMQ_URL, (url, options) =>
      rabbitmqWorker(t.skiplock, { ...options, url, queue: prefix }),
    );
  });

  it('stops within its bounds when the broker stops answering while a retry waits for its confirm', async () => {
    const prefix = relayed('q');
    const proxy = await startNetProxy({
      host: '127.0.0.1',
      port: Number(new URL(RABBITMQ_URL).port || 5672),
    });
    t.defer(() => proxy.close());
    let thrown = 0;
    const worker = rabbitmqWorker(t.skiplock, {
      url: proxy.url(RABBITMQ_URL),
      queue: prefix,
      queues: ['q'],
      shutdownTimeoutMs: 1000,
      handleSignals: false,
      handlers: {
        // Its retry goes out to a broker that no longer answers.
        boom: () => {
          proxy.freeze();
          thrown++;
          throw new Error('boom');
        },
      },
    });
    await started(worker);
    await t.skiplock.enqueue('boom', {}, { queue: 'q' });
    await until(() => thrown === 1, 'the handler thrown');
    // Bounded by shutdownTimeoutMs per round trip: the retry's confirm, the delivery's, the close.
    const stopping = worker.stop().then(() => 'stopped');
    expect(
      await Promise.race([stopping, new Promise((resolve) => setTimeout(resolve, 10_000, 'late'))]),
    ).toBe('stopped');
  });

  it('runs handlers, retries after the backoff, writes a dead job back, and requeue relays it again', async () => {
    const prefix = relayed('q');
    let fixed = false;
    const attempts: [string, number][] = [];
    const worker = await started(
      rabbitmqWorker(t.skiplock, {
        url: RABBITMQ_URL,
        queue: prefix,
        queues: ['q'],
        handleSignals: false,
        handlers: {
          greet: (job: Job) => void attempts.push(['greet', job.attempts]),
          doomed: {
            maxAttempts: 3,
            backoff: 100,
            handle: (job) => {
              attempts.push(['doomed', job.attempts]);
              if (!fixed) throw new Error(`broken on attempt ${job.attempts}`);
            },
          },
        },
      }),
    );
    const successes: string[] = [];
    worker.on('job:success', (job) => successes.push(job.id));
    const greet = await t.skiplock.enqueue('greet', { name: 'Ada' }, { queue: 'q' });
    const doomed = await t.skiplock.enqueue('doomed', {}, { queue: 'q' });
    await until(async () => (await t.row(doomed.id))?.status === 'dead', 'the job written back dead');
    expect(successes).toEqual([greet.id]);
    const record = (await t.skiplock.getJob(doomed.id))!;
    expect([record.status, record.attempts, record.maxAttempts]).toEqual(['dead', 3, 3]);
    expect(record.errors.map((e) => [e.attempt, e.error.split('\n')[0]])).toEqual([
      [1, 'Error: broken on attempt 1'],
      [2, 'Error: broken on attempt 2'],
      [3, 'Error: broken on attempt 3'],
    ]);
    fixed = true;
    expect(await t.skiplock.requeue({ ids: [doomed.id] })).toBe(1);
    await until(() => successes.length === 2, 'the requeued job run');
    expect(successes).toEqual([greet.id, doomed.id]);
    expect(attempts.filter(([kind]) => kind === 'doomed').map(([, n]) => n)).toEqual([1, 2, 3, 1]);
  });

  it('stops within its shutdown timeout; the abandoned job comes back to the next worker, uncharged', async () => {
    const prefix = relayed('q');
    await expectAbandonedJobBackUncharged(t.skiplock, (options) =>
      started(rabbitmqWorker(t.skiplock, { ...options, url: RABBITMQ_URL, queue: prefix })),
    );
  });

  it('runs at most `concurrency` handlers at once across its queues', async () => {
    const prefix = relayed('q1');
    // A second relay to the same prefix for the second queue.
    t.defer(() => deleteQueues([rabbitmqQueueName(prefix, 'q2')]));
    b.relay({ target: rabbitmqTarget({ url: RABBITMQ_URL, queue: prefix }), queues: ['q2'] }).start();
    const release = gate();
    let active = 0;
    let most = 0;
    let done = 0;
    await started(
      rabbitmqWorker(t.skiplock, {
        url: RABBITMQ_URL,
        queue: prefix,
        queues: ['q1', 'q2'],
        concurrency: 2,
        handleSignals: false,
        handlers: {
          hold: async () => {
            active++;
            most = Math.max(most, active);
            await release.opened;
            active--;
            done++;
          },
        },
      }),
    );
    await t.skiplock.enqueueMany(
      Array.from({ length: 6 }, (_, n) => ({ kind: 'hold', payload: {}, queue: n % 2 ? 'q1' : 'q2' })),
    );
    await until(() => active === 2, 'two handlers running');
    await until(async () => (await t.jobCount()) === 0, 'every job relayed');
    expect([active, most, done]).toEqual([2, 2, 0]);
    release.open();
    await until(() => done === 6, 'every job done');
    expect(most).toBe(2);
  });
});
