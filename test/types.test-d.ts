import { describe, expectTypeOf, it } from 'vitest';
import type { EnqueuedJob, Skiplock, Worker } from '../src/index.js';
import type { InvoiceAndImageJobs } from './support/typed-jobs.js';

declare const skiplock: Skiplock<InvoiceAndImageJobs>;

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

  it('types the worker events and the new options', () => {
    const worker = skiplock.worker({
      handlers: {},
      maintenanceOnly: true,
      prefetch: 0,
      prefetchTimeoutMs: 1000,
      statementTimeoutMs: 5000,
    });
    worker.on('job:failure', (job, thrown, outcome) => {
      expectTypeOf(job.id).toEqualTypeOf<string>();
      expectTypeOf(thrown).toEqualTypeOf<unknown>();
      expectTypeOf(outcome.status).toEqualTypeOf<'queued' | 'failed' | 'dead'>();
      expectTypeOf(outcome.lastError).toEqualTypeOf<string>();
    });
    worker.on('job:success', (_job, info) => {
      expectTypeOf(info.waitMs).toEqualTypeOf<number>();
      expectTypeOf(info.durationMs).toEqualTypeOf<number>();
    });
    worker.on('worker:claim', (count) => expectTypeOf(count).toEqualTypeOf<number>());
    // @ts-expect-error: events are namespaced
    worker.on('claim', () => {});
    // @ts-expect-error: requeue needs a filter or all: true
    void skiplock.requeue();
    void skiplock.requeue({ all: true });
  });
});
