/**
 * A relay process. With RELAY_CRASH_AFTER_BATCHES=n (default 1) it publishes
 * batches normally until its n-th, then tells its parent (`published`) and
 * hangs before removing that batch's jobs, so the parent can SIGKILL it in
 * between; with 0 it relays on until it is killed, and tells its parent
 * `ready` once it started.
 * Env: DATABASE_URL, SKIPLOCK_SCHEMA, RELAY_QUEUE, RELAY_BATCH_SIZE (default 100),
 * RELAY_SWEEP_INTERVAL_MS (default 60000), and NATS_URL + NATS_STREAM, or
 * AMQP_URL + AMQP_QUEUE for RabbitMQ.
 */
import { createRelay, Skiplock } from '../../src/index.js';
import { targetFromEnv } from './broker-from-env.js';

const skiplock = new Skiplock({
  connectionString: process.env.DATABASE_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
const target = targetFromEnv();
const crashAfter = Number(process.env.RELAY_CRASH_AFTER_BATCHES ?? 1);
let batches = 0;
const relay = createRelay(skiplock, {
  target: {
    name: target.name,
    connect: (timeoutMs) => target.connect(timeoutMs),
    close: (timeoutMs) => target.close(timeoutMs),
    async publish(jobs, timeoutMs) {
      const acked = await target.publish(jobs, timeoutMs);
      if (crashAfter === 0 || ++batches < crashAfter) return acked;
      process.send?.('published');
      return new Promise<never>(() => {});
    },
  },
  queues: [process.env.RELAY_QUEUE!],
  batchSize: Number(process.env.RELAY_BATCH_SIZE ?? 100),
  lingerMs: 20,
  visibilityTimeoutMs: 1000,
  publishTimeoutMs: 500,
  retryDelayMs: 100,
  sweepIntervalMs: Number(process.env.RELAY_SWEEP_INTERVAL_MS ?? 60_000),
  handleSignals: false,
});
relay.on('error', () => {});
relay.start();
if (crashAfter === 0) process.send?.('ready');
