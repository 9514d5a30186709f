/**
 * Every function that takes a Skiplock takes README's typed instance
 * (`new Skiplock<Jobs>(…)`), and the operations that filter by kind check the
 * kinds against its map.
 */
import { describe, expectTypeOf, it } from 'vitest';
import { createDashboard, type DashboardServer, serveDashboard } from '../src/dashboard/index.js';
import { type JobRecord, type JobSummary, Skiplock, type Worker } from '../src/index.js';
import {
  createMetrics,
  type MetricsServer,
  type SkiplockMetrics,
  serveWorkerMetrics,
} from '../src/telemetry/metrics.js';
import { type DrainResult, drain } from '../src/testing/index.js';

type Jobs = { send_invoice_email: { orderId: number }; resize_image: { url: string } };
const skiplock = new Skiplock<Jobs>({ connectionString: 'postgres://localhost/app' });
declare const worker: Worker;
declare const untyped: Skiplock;

describe('a typed Skiplock', () => {
  it('is taken by createDashboard and serveDashboard', () => {
    createDashboard(skiplock, { basePath: '/admin/jobs' });
    expectTypeOf(serveDashboard(skiplock, { port: 0 })).resolves.toEqualTypeOf<DashboardServer>();
    createDashboard(untyped);
  });

  it('is taken by createMetrics and serveWorkerMetrics', () => {
    expectTypeOf(createMetrics(skiplock)).resolves.toEqualTypeOf<SkiplockMetrics>();
    expectTypeOf(serveWorkerMetrics(skiplock, worker, { port: 0 })).resolves.toEqualTypeOf<MetricsServer>();
    void createMetrics(untyped);
  });

  it('is taken by the testing helpers', () => {
    expectTypeOf(drain(skiplock, {})).resolves.toEqualTypeOf<DrainResult>();
  });

  it('checks the kinds of cancel and requeue filters against its map', () => {
    void skiplock.cancel({ kind: 'send_invoice_email' });
    void skiplock.cancel({ kind: ['send_invoice_email', 'resize_image'], status: 'queued' });
    void skiplock.requeue({ kind: 'resize_image' });
    // @ts-expect-error: not a kind of the map
    void skiplock.cancel({ kind: 'send_invoice_emial' });
    // @ts-expect-error: not a kind of the map
    void skiplock.requeue({ kind: ['resize_image', 'nope'] });
    // Without a map any kind goes.
    void untyped.cancel({ kind: 'anything' });
    void untyped.requeue({ kind: 'anything' });
  });

  it('types listJobs by whether it reads whole payloads or previews', () => {
    expectTypeOf(skiplock.listJobs()).resolves.toEqualTypeOf<JobRecord[]>();
    expectTypeOf(skiplock.listJobs({ status: 'dead' })).resolves.toEqualTypeOf<JobRecord[]>();
    expectTypeOf(skiplock.listJobs({ payloadPreviewChars: 200 })).resolves.toEqualTypeOf<JobSummary[]>();
    void skiplock.listJobs({ payloadPreviewChars: 200 }).then(([job]) => {
      expectTypeOf(job!.payloadPreview).toEqualTypeOf<string>();
      expectTypeOf(job!.payloadTruncated).toEqualTypeOf<boolean>();
      // @ts-expect-error: a summary has no payload
      void job!.payload;
    });
  });
});
