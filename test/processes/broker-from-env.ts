/**
 * The broker of a relay or broker-side worker process, from its environment:
 * NATS_URL + NATS_STREAM, or AMQP_URL + AMQP_QUEUE for RabbitMQ.
 */

import type { BrokerWorkerOptions } from '../../src/brokers/broker-worker.js';
import { natsTarget, natsWorker } from '../../src/brokers/nats.js';
import { rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import type { JobMap, Skiplock } from '../../src/index.js';
import type { RelayTarget } from '../../src/relay/relay.js';

/** The relay target the environment names. */
export function targetFromEnv(): RelayTarget {
  return process.env.AMQP_URL
    ? rabbitmqTarget({ url: process.env.AMQP_URL, queue: process.env.AMQP_QUEUE! })
    : natsTarget({ servers: process.env.NATS_URL!, stream: process.env.NATS_STREAM! });
}

/** A broker-side worker on the broker the environment names (NATS redelivers after 1 s). */
export function workerFromEnv(skiplock: Skiplock, options: BrokerWorkerOptions<JobMap>) {
  return process.env.AMQP_URL
    ? rabbitmqWorker(skiplock, { ...options, url: process.env.AMQP_URL, queue: process.env.AMQP_QUEUE! })
    : natsWorker(skiplock, {
        ...options,
        servers: process.env.NATS_URL!,
        stream: process.env.NATS_STREAM!,
        ackWaitMs: 1000,
      });
}
