/** skiplock/testing is typed by the kind → payload map, as workers are. */
import { describe, expectTypeOf, it } from 'vitest';
import type { JobRecord, Skiplock } from '../src/index.js';
import { type DrainResult, drain, enqueued } from '../src/testing/index.js';

type Jobs = { send_invoice_email: { orderId: number }; resize_image: { url: string } };
declare const skiplock: Skiplock<Jobs>;

describe('skiplock/testing', () => {
  it('types handlers, kinds and results', () => {
    expectTypeOf(
      drain(skiplock, {
        send_invoice_email: (job) => {
          expectTypeOf(job.payload).toEqualTypeOf<{ orderId: number }>();
        },
      }),
    ).resolves.toEqualTypeOf<DrainResult>();
    void drain(skiplock, {}, { kinds: ['resize_image'], queue: ['a', 'b'] });
    // @ts-expect-error: not a kind of the map
    void drain(skiplock, {}, { kinds: ['nope'] });
    // @ts-expect-error: wrong payload field in a handler
    void drain(skiplock, { resize_image: (job) => job.payload.orderId });
    expectTypeOf(enqueued(skiplock, { kind: 'send_invoice_email' })).resolves.toEqualTypeOf<JobRecord[]>();
    // @ts-expect-error: not a kind of the map
    void enqueued(skiplock, { kind: 'nope' });
  });
});
