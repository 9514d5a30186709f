/**
 * A missing optional package fails the feature that needs it with one error
 * class, MissingDependencyError, naming the package and its install command.
 * The brokers' clients are optional too: without them, `skiplock/nats` and
 * `skiplock/rabbitmq` still import, and connecting fails the same way.
 * (Tracing's own case is in tracing.test.ts; the command line's in test/cli.)
 */
import { describe, expect, it } from 'vitest';
import { missing, reportWithout } from './support/missing-packages.js';

describe('without the optional packages installed', () => {
  it.each([
    {
      what: 'metrics and the Kysely and Drizzle adapters',
      process: 'processes/without-optional-packages.ts',
      hidden: ['prom-client', 'kysely', 'drizzle-orm'],
      expected: {
        metrics: missing('prom-client', 'skiplock metrics'),
        kysely: missing('kysely', 'skiplock/kysely'),
        drizzle: missing('drizzle-orm', 'skiplock/drizzle'),
      },
    },
    {
      what: 'broker targets and workers',
      process: 'processes/without-broker-packages.ts',
      hidden: ['@nats-io/transport-node', '@nats-io/jetstream', 'amqplib'],
      expected: {
        natsTarget: missing('@nats-io/transport-node', 'skiplock/nats'),
        natsWorker: missing('@nats-io/transport-node', 'skiplock/nats'),
        rabbitmqTarget: missing('amqplib', 'skiplock/rabbitmq'),
        rabbitmqWorker: missing('amqplib', 'skiplock/rabbitmq'),
      },
    },
  ])('$what fail with a MissingDependencyError naming the package', async ({ process, hidden, expected }) => {
    expect(await reportWithout(process, hidden)).toEqual(expected);
  });
});
