/**
 * skiplock's brokers in a process where their clients cannot be found
 * (SKIPLOCK_TEST_HIDE, test/support/hide-packages.mjs): reports how each
 * fails, and exits.
 */
import { failureReport as failure } from '../support/missing-packages.js';

const { Skiplock } = await import('../../src/index.js');
const { natsTarget, natsWorker } = await import('../../src/brokers/nats.js');
const { rabbitmqTarget, rabbitmqWorker } = await import('../../src/brokers/rabbitmq.js');
const skiplock = new Skiplock({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
const handlers = { a: () => {} };
const report: Record<string, unknown> = {
  natsTarget: await natsTarget({ servers: 'nats://127.0.0.1:1', stream: 's' })
    .connect()
    .then(() => 'loaded', failure),
  natsWorker: await natsWorker(skiplock, {
    servers: 'nats://127.0.0.1:1',
    stream: 's',
    handlers,
    handleSignals: false,
  })
    .start()
    .then(() => 'loaded', failure),
  rabbitmqTarget: await rabbitmqTarget({ url: 'amqp://127.0.0.1:1' })
    .connect()
    .then(() => 'loaded', failure),
  rabbitmqWorker: await rabbitmqWorker(skiplock, {
    url: 'amqp://127.0.0.1:1',
    handlers,
    handleSignals: false,
  })
    .start()
    .then(() => 'loaded', failure),
};
await skiplock.close();
process.send?.(report, () => process.exit(0));
