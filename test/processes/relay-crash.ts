/**
 * A relay that publishes one batch, tells its parent (`published`), and then
 * hangs before removing the jobs, so the parent can SIGKILL it in between.
 * Env: DATABASE_URL, SKIPLOCK_SCHEMA, NATS_URL, NATS_STREAM, RELAY_QUEUE.
 */
import { natsTarget } from '../../src/brokers/nats.js';
import { createRelay, Skiplock } from '../../src/index.js';

const skiplock = new Skiplock({
  connectionString: process.env.DATABASE_URL!,
  schema: process.env.SKIPLOCK_SCHEMA!,
});
const target = natsTarget({ servers: process.env.NATS_URL!, stream: process.env.NATS_STREAM! });
const relay = createRelay(skiplock, {
  target: {
    ...target,
    async publish(jobs, timeoutMs) {
      const acked = await target.publish(jobs, timeoutMs);
      process.send?.('published');
      return new Promise<Set<string>>(() => {
        void acked;
      });
    },
  },
  queues: [process.env.RELAY_QUEUE!],
  visibilityTimeoutMs: 1000,
  publishTimeoutMs: 500,
  handleSignals: false,
});
relay.start();
