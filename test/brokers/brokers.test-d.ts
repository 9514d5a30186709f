/**
 * The relay and the broker-side workers take README's typed instance, and the
 * workers type each handler's job by its kind, as `skiplock.worker` does.
 */
import { describe, expectTypeOf, it } from 'vitest';
import { type NatsWorker, natsTarget, natsWorker } from '../../src/brokers/nats.js';
import { type RabbitmqWorker, rabbitmqTarget, rabbitmqWorker } from '../../src/brokers/rabbitmq.js';
import { createRelay, type Relay, Skiplock } from '../../src/index.js';

type Jobs = { send_invoice_email: { orderId: number }; resize_image: { url: string } };
const skiplock = new Skiplock<Jobs>({ connectionString: 'postgres://localhost/app' });

describe('the relay and broker-side workers', () => {
  it('take a typed Skiplock', () => {
    expectTypeOf(
      createRelay(skiplock, { target: natsTarget({ servers: 'nats://h:4222', stream: 'jobs' }) }),
    ).toEqualTypeOf<Relay>();
    expectTypeOf(
      createRelay(skiplock, { target: rabbitmqTarget({ url: 'amqp://h' }) }),
    ).toEqualTypeOf<Relay>();
  });

  it('type each handler by its kind', () => {
    const nats = natsWorker(skiplock, {
      servers: 'nats://h:4222',
      stream: 'jobs',
      handlers: {
        send_invoice_email: (job) => expectTypeOf(job.payload).toEqualTypeOf<{ orderId: number }>(),
        resize_image: {
          maxAttempts: 3,
          handle: (job, { signal }) => {
            expectTypeOf(job.payload).toEqualTypeOf<{ url: string }>();
            expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
          },
        },
      },
    });
    expectTypeOf(nats).toEqualTypeOf<NatsWorker>();
    const rabbit = rabbitmqWorker(skiplock, {
      url: 'amqp://h',
      handlers: { send_invoice_email: (job) => expectTypeOf(job.kind).toEqualTypeOf<'send_invoice_email'>() },
    });
    expectTypeOf(rabbit).toEqualTypeOf<RabbitmqWorker>();
    // @ts-expect-error: a kind the map does not have
    natsWorker(skiplock, { servers: 'nats://h:4222', stream: 'jobs', handlers: { unknown_kind: () => {} } });
  });
});
