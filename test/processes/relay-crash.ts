/**
 * A relay that publishes batches normally until its RELAY_CRASH_AFTER_BATCHES-th
 * (default 1), then tells its parent (`published`) and hangs before removing
 * that batch's jobs, so the parent can SIGKILL it in between.
 * Env: DATABASE_URL, SKIPLOCK_SCHEMA, RELAY_QUEUE, RELAY_BATCH_SIZE (default 100), and
 * NATS_URL + NATS_STREAM, or AMQP_URL + AMQP_QUEUE for RabbitMQ.
 */
import { natsTarget } from '../../src/brokers/nats.js';
import { rabbitmqTarget } from '../../src/brokers/rabbitmq.js';
import { createRelay, Skiplock } from '../../src/index.js';

const skiplock = new Skiplock({
  connectionString: process.env.DATABASE_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
const target = process.env.AMQP_URL
  ? rabbitmqTarget({ url: process.env.AMQP_URL, queue: process.env.AMQP_QUEUE! })
  : natsTarget({ servers: process.env.NATS_URL!, stream: process.env.NATS_STREAM! });
const crashAfter = Number(process.env.RELAY_CRASH_AFTER_BATCHES ?? 1);
let batches = 0;
const relay = createRelay(skiplock, {
  target: {
    name: target.name,
    connect: () => target.connect(),
    close: (timeoutMs) => target.close(timeoutMs),
    async publish(jobs, timeoutMs) {
      const acked = await target.publish(jobs, timeoutMs);
      if (++batches < crashAfter) return acked;
      process.send?.('published');
      return new Promise<Set<string>>(() => {});
    },
  },
  queues: [process.env.RELAY_QUEUE!],
  batchSize: Number(process.env.RELAY_BATCH_SIZE ?? 100),
  lingerMs: 20,
  visibilityTimeoutMs: 1000,
  publishTimeoutMs: 500,
  handleSignals: false,
});
relay.start();
