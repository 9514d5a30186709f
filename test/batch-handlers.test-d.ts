/** Batch handlers are typed per kind: `handleBatch` gets its kind's jobs. */
import { describe, expectTypeOf, it } from 'vitest';
import type { BatchHandlerDefinition, Job, Skiplock, Worker } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import type { InvoiceAndImageJobs } from './support/typed-jobs.js';

declare const skiplock: Skiplock<InvoiceAndImageJobs>;

describe('handleBatch', () => {
  it('gets the jobs of its kind, typed, and the batch signal', () => {
    expectTypeOf(
      skiplock.worker({
        handlers: {
          send_invoice_email: {
            maxBatchSize: 500,
            maxWaitMs: 200,
            handleBatch: async (jobs, { signal }) => {
              expectTypeOf(jobs).toEqualTypeOf<Job<'send_invoice_email', { orderId: number }>[]>();
              expectTypeOf(jobs[0]!.payload.orderId).toEqualTypeOf<number>();
              expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
              return jobs.map((job) => (job.payload.orderId > 0 ? undefined : new Error('no order')));
            },
          },
          resize_image: async (job) => {
            expectTypeOf(job.payload.url).toEqualTypeOf<string>();
          },
        },
      }),
    ).toEqualTypeOf<Worker>();
  });

  it('refuses a payload field of another kind, and a result that is not an array', () => {
    skiplock.worker({
      handlers: {
        send_invoice_email: {
          // @ts-expect-error: the payload has no such field
          handleBatch: async (jobs) => jobs.map((job) => job.payload.url),
        },
      },
    });
    skiplock.worker({
      handlers: {
        send_invoice_email: {
          // @ts-expect-error: one outcome per job, in an array
          handleBatch: async () => 'done',
        },
      },
    });
  });

  it('types a definition declared on its own, and drain takes it', () => {
    const resize: BatchHandlerDefinition<'resize_image', InvoiceAndImageJobs['resize_image']> = {
      handleBatch: (jobs) => jobs.map((job) => job.payload.width),
    };
    void drain(skiplock, { resize_image: resize });
  });
});
