import type pg from 'pg';
import { describe, expectTypeOf, it } from 'vitest';
import type {
  Skiplock,
  TransactionalHandlerContext,
  TransactionalHandlerDefinition,
  Worker,
} from '../src/index.js';

type Jobs = { charge_order: { orderId: number }; send_receipt: { orderId: number } };
declare const skiplock: Skiplock<Jobs>;

describe('transactional handlers', () => {
  it('hand the handler its transaction’s client, typed by the kind’s payload', () => {
    expectTypeOf(
      skiplock.worker({
        handlers: {
          charge_order: {
            transactional: true,
            maxAttempts: 5,
            handle: async (job, { client, signal }: TransactionalHandlerContext) => {
              expectTypeOf(job.payload).toEqualTypeOf<{ orderId: number }>();
              expectTypeOf(client).toEqualTypeOf<pg.PoolClient>();
              expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
            },
          },
          send_receipt: {
            maxAttempts: 3,
            handle: async (job, context) => {
              // A definition without `transactional` types its job by its kind.
              expectTypeOf(job.payload).toEqualTypeOf<{ orderId: number }>();
              // @ts-expect-error: only transactional handlers get a client
              void context.client;
            },
          },
        },
      }),
    ).toEqualTypeOf<Worker>();
    const definition: TransactionalHandlerDefinition<'charge_order', { orderId: number }> = {
      transactional: true,
      handle: (job, { client }) => client.query('SELECT $1::int', [job.payload.orderId]),
    };
    skiplock.worker({ handlers: { charge_order: definition } });
    skiplock.worker({
      handlers: {
        // @ts-expect-error: the payload has no such field
        charge_order: { transactional: true, handle: (job) => job.payload.url },
      },
    });
  });
});
