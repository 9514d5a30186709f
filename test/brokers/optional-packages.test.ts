/**
 * The brokers' clients are optional packages: without them, `skiplock/nats`
 * and `skiplock/rabbitmq` still import, and connecting fails with a
 * MissingDependencyError naming the package and its install command.
 */
import { describe, expect, it } from 'vitest';
import { missing, reportWithout } from '../support/missing-packages.js';

describe('without the broker clients installed', () => {
  it('targets and workers fail to connect with a MissingDependencyError naming the package', async () => {
    const report = await reportWithout('processes/without-broker-packages.ts', [
      '@nats-io/transport-node',
      '@nats-io/jetstream',
      'amqplib',
    ]);
    expect(report).toEqual({
      natsTarget: missing('@nats-io/transport-node', 'skiplock/nats'),
      natsWorker: missing('@nats-io/transport-node', 'skiplock/nats'),
      rabbitmqTarget: missing('amqplib', 'skiplock/rabbitmq'),
      rabbitmqWorker: missing('amqplib', 'skiplock/rabbitmq'),
    });
  });
});
