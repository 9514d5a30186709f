import { describe, expectTypeOf, it } from 'vitest';
import type { EnqueuedJob, Skiplock, Worker } from '../src/index.js';

type Jobs = {
  send_invoice_email: { orderId: number };
  resize_image: { url: string; width?: number };
};
declare const skiplock: Skiplock<Jobs>;

describe('the kind → payload map', () => {
  it('types enqueue', () => {
    expectTypeOf(skiplock.enqueue('send_invoice_email', { orderId: 1 })).resolves.toEqualTypeOf<
      EnqueuedJob<'send_invoice_email', { orderId: number }>
    >();
    // @ts-expect-error: wrong payload type
    void skiplock.enqueue('send_invoice_email', { orderId: '1' });
    // @ts-expect-error: unknown kind
    void skiplock.enqueue('nope', {});
    // @ts-expect-error: missing field
    void skiplock.enqueue('resize_image', { width: 3 });
  });

  it('types enqueueMany items by kind', () => {
    void skiplock.enqueueMany([
      { kind: 'send_invoice_email', payload: { orderId: 1 } },
      { kind: 'resize_image', payload: { url: 'x' }, priority: 2 },
    ]);
    // @ts-expect-error: payload of the other kind
    void skiplock.enqueueMany([{ kind: 'send_invoice_email', payload: { url: 'x' } }]);
  });

  it('types handlers', () => {
    expectTypeOf(
      skiplock.worker({
        handlers: {
          send_invoice_email: async (job, { signal }) => {
            expectTypeOf(job.payload).toEqualTypeOf<{ orderId: number }>();
            expectTypeOf(job.kind).toEqualTypeOf<'send_invoice_email'>();
            expectTypeOf(job.id).toEqualTypeOf<string>();
            expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
          },
          resize_image: (job) => {
            expectTypeOf(job.payload.width).toEqualTypeOf<number | undefined>();
          },
        },
      }),
    ).toEqualTypeOf<Worker>();
    skiplock.worker({
      handlers: {
        // @ts-expect-error: the payload has no such field
        send_invoice_email: (job) => job.payload.url,
      },
    });
    skiplock.worker({
      handlers: {
        // @ts-expect-error: not a kind of the map
        unknown_kind: () => {},
      },
    });
  });
});
