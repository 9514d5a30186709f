/**
 * A relay SIGKILLed between the broker's acknowledgement and the removal of its
 * batch, 20 times in a row: every job arrives, and the repeats are dropped
 * (NATS: by the stream's duplicate window) or deduplicated by the consumer
 * (RabbitMQ: rabbitmqWorker by message id), so the counts are exact.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import { rabbitmqQueueName, rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { Relay } from '../../src/index.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, streamMessages, until } from '../support/nats.js';
import { exited, forkScript, killedAfterTest, sent } from '../support/processes.js';
import { queueDepth, RABBITMQ_URL } from '../support/rabbitmq.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

const JOBS = 120;
const KILLS = 20;
const BATCH = 3;

/**
 * Kills a relay process 20 times between publish and removal: run `i` removes
 * `i % 3` batches normally, then is SIGKILLed after publishing the next; the
 * sweeper gives that batch (and those claimed behind it) back once the dead
 * relay's 1 s lease ran out.
 */
async function killRepeatedly(env: Record<string, string>): Promise<void> {
  for (let i = 0; i < KILLS; i++) {
    const child = killedAfterTest(
      t,
      forkScript('../processes/relay-crash.ts', {
        DATABASE_URL: t.url,
        SKIPLOCK_SCHEMA: t.schema,
        RELAY_QUEUE: 'relayed',
        RELAY_BATCH_SIZE: String(BATCH),
        RELAY_CRASH_AFTER_BATCHES: String((i % 3) + 1),
        ...env,
      }),
    );
    await sent(child, 'published');
    child.kill('SIGKILL');
    expect(await exited(child)).toBe('SIGKILL');
    // The published batch, and the batches claimed behind it (up to the default 4 in flight).
    const held = await t.jobCount("status = 'running'");
    expect(held % BATCH, `run ${i}: ${held} held`).toBe(0);
    expect(held).toBeGreaterThanOrEqual(BATCH);
    expect(held).toBeLessThanOrEqual(4 * BATCH);
    await until(
      async () => {
        await t.skiplock.sweep();
        return (await t.jobCount("status = 'running'")) === 0;
      },
      `run ${i}: the killed relay's batch given back`,
      60_000,
    );
  }
}

/** The remaining jobs through a relay that is not killed. */
async function relayTheRest(target: ReturnType<typeof natsTarget>): Promise<Relay> {
  const relay = b.relay({ target, queues: ['relayed'] });
  relay.start();
  await until(async () => (await t.jobCount()) === 0, 'every job relayed', 60_000);
  return relay;
}

describe('a relay SIGKILLed between publish and removal, 20 times in a row', () => {
  it('NATS: every job is in the stream exactly once', async () => {
    const stream = b.stream('relay_kills');
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: JOBS }, (_, n) => ({ kind: 'a', payload: { n }, queue: 'relayed' })),
    );
    await killRepeatedly({ NATS_URL, NATS_STREAM: stream });
    await relayTheRest(natsTarget({ servers: NATS_URL, stream }));
    const messages = await streamMessages(stream);
    expect(messages.length).toBe(JOBS);
    expect(messages.map((m) => m.job.id).sort()).toEqual(jobs.map((job) => job.id).sort());
    expect(messages.map((m) => m.msgId)).toEqual(messages.map((m) => m.job.messageId));
  }, 300_000);

  it('RabbitMQ: the repeats reach the queue, and rabbitmqWorker runs every job exactly once', async () => {
    const prefix = b.rabbitmqPrefix(['relayed'], 'skiplock_kills');
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: JOBS }, (_, n) => ({ kind: 'a', payload: { n }, queue: 'relayed' })),
    );
    await killRepeatedly({ AMQP_URL: RABBITMQ_URL, AMQP_QUEUE: prefix });
    await relayTheRest(rabbitmqTarget({ url: RABBITMQ_URL, queue: prefix }));
    const ran: string[] = [];
    await b.started(
      rabbitmqWorker(t.skiplock, {
        url: RABBITMQ_URL,
        queue: prefix,
        queues: ['relayed'],
        concurrency: 5,
        handleSignals: false,
        handlers: {
          a: async (job: { id: string }) => {
            ran.push(job.id);
          },
        },
      }),
    );
    await until(() => ran.length >= JOBS, 'every job ran', 120_000);
    // The killed relays published 20 batches again; the queue holds them until the worker has seen them all.
    await until(
      async () => (await queueDepth(rabbitmqQueueName(prefix, 'relayed'))) === 0,
      'the queue drained',
    );
    expect(ran.length).toBe(JOBS);
    expect(ran.sort()).toEqual(jobs.map((job) => job.id).sort());
  }, 300_000);
});
