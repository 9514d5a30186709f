/**
 * Delivery is at least once; an idempotent handler makes the effect exactly
 * once. A relay is SIGKILLed between the broker's acknowledgement and the
 * removal of its batch (which publishes that batch again), and broker-side
 * worker processes SIGKILL themselves right after a handler wrote its effect,
 * before the delivery is acknowledged (which has the broker deliver it again).
 * The handler writes its effect keyed by the job's id, ON CONFLICT DO NOTHING:
 * every job has its effect once, and the repeats are counted as deliveries.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import { rabbitmqTarget } from '../../src/brokers/rabbitmq.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, until } from '../support/nats.js';
import { exited, forkScript, killedAfterTest, sent } from '../support/processes.js';
import { RABBITMQ_URL } from '../support/rabbitmq.js';
import { brokerTest, effectLedger } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

const QUEUE = 'relayed';
const JOBS = 60;
/** Worker processes that kill themselves, each after this many deliveries. */
const WORKER_KILLS = 3;
const DELIVERIES_BEFORE_KILL = 5;

const brokers = [
  {
    name: 'NATS',
    setUp: () => {
      const stream = b.stream('exactly_once');
      return {
        env: { NATS_URL, NATS_STREAM: stream },
        target: natsTarget({ servers: NATS_URL, stream }),
      };
    },
  },
  {
    name: 'RabbitMQ',
    setUp: () => {
      const prefix = b.rabbitmqPrefix([QUEUE]);
      return {
        env: { AMQP_URL: RABBITMQ_URL, AMQP_QUEUE: prefix },
        target: rabbitmqTarget({ url: RABBITMQ_URL, queue: prefix }),
      };
    },
  },
];

describe.each(brokers)('exactly-once effect through $name', ({ setUp }) => {
  it('every job has its effect once while a relay and workers are killed mid-delivery', async () => {
    const { env, target } = setUp();
    const ledger = await effectLedger(t);
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: JOBS }, (_, n) => ({ kind: 'effect', payload: { n }, queue: QUEUE })),
    );

    // A relay killed after its first batch was acknowledged, before it removed it.
    const crashed = killedAfterTest(
      t,
      forkScript('../processes/relay-crash.ts', {
        DATABASE_URL: t.url,
        SKIPLOCK_SCHEMA: t.schema,
        RELAY_QUEUE: QUEUE,
        RELAY_BATCH_SIZE: '10',
        ...env,
      }),
    );
    await sent(crashed, 'published');
    crashed.kill('SIGKILL');
    expect(await exited(crashed)).toBe('SIGKILL');
    await until(async () => {
      await t.skiplock.sweep();
      return (await t.jobCount("status = 'running'")) === 0;
    }, "the killed relay's batch given back");
    b.relay({ target, queues: [QUEUE], batchSize: 10 }).start();

    const workerEnv = { ...env, BROKER_QUEUE: QUEUE };
    for (let k = 1; k <= WORKER_KILLS; k++) {
      const worker = await ledger.startWorker(workerEnv, DELIVERIES_BEFORE_KILL);
      expect(await exited(worker)).toBe('SIGKILL');
    }
    const last = await ledger.startWorker(workerEnv);
    await until(async () => (await ledger.effects()) === JOBS, 'every effect written', 60_000);
    await until(async () => (await t.jobCount()) === 0, 'every job relayed');
    last.kill('SIGTERM');
    expect(await exited(last)).toBe('SIGTERM');

    const deliveries = await ledger.deliveries();
    console.log(`[exactly-once] ${JOBS} jobs, ${JOBS} effects, ${deliveries} deliveries`);
    expect(await ledger.effectIds()).toEqual(jobs.map((job) => job.id).sort());
    // Each killed worker's last delivery had its effect written and was delivered again.
    expect(deliveries).toBeGreaterThanOrEqual(JOBS + WORKER_KILLS);
  }, 180_000);
});
