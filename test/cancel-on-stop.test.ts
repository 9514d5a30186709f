/**
 * A cancel the worker has not heard of yet when it stops: the stop gives the
 * running job back, and the release ends it `cancelled` (its cancel was
 * requested). The handler ran, so its attempt stays charged as with every
 * cancel of a running job, and the worker reports `job:cancelled`, not
 * `job:released` (which means "back to queued").
 */
import { expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

it('a running job whose cancel the worker missed ends cancelled on stop, attempts unchanged, reported cancelled', async () => {
  const events: string[] = [];
  // No LISTEN and a slow heartbeat: the worker learns of the cancel by neither.
  const worker = t.worker({
    handlers: { slow: () => new Promise(() => {}) },
    listen: false,
    heartbeatIntervalMs: 60_000,
    visibilityTimeoutMs: 600_000,
    shutdownTimeoutMs: 200,
    pollIntervalMs: 50,
  });
  for (const name of ['job:start', 'job:released', 'job:cancelled'] as const) {
    worker.on(name, (job) => events.push(`${name} ${job.id}`));
  }
  await worker.start();
  const job = await t.skiplock.enqueue('slow', {});
  await waitFor(() => events.includes(`job:start ${job.id}`), 10_000, 'the job to start');
  expect(await t.skiplock.cancel({ ids: [job.id] })).toEqual({ cancelled: 0, running: 1 });

  await worker.stop();

  expect(await t.row(job.id)).toEqual({
    status: 'cancelled',
    attempts: 1,
    locked_by: null,
    last_error: null,
  });
  expect(events).toEqual([`job:start ${job.id}`, `job:cancelled ${job.id}`]);
});

it('a buffered job whose cancel the worker missed ends cancelled on stop, its claim not charged', async () => {
  const events: string[] = [];
  let blocked: string | undefined;
  const worker = t.worker({
    handlers: {
      // Quick until the buffer holds jobs, then one blocks so that they wait there.
      step: async (job) => {
        if (blocked === undefined && worker.bufferedCount > 0) {
          blocked = job.id;
          await new Promise(() => {});
        }
      },
    },
    concurrency: 1,
    prefetch: 10,
    onSuccess: 'keep',
    listen: false,
    heartbeatIntervalMs: 60_000,
    visibilityTimeoutMs: 600_000,
    shutdownTimeoutMs: 200,
    pollIntervalMs: 50,
  });
  for (const name of ['job:released', 'job:cancelled'] as const) {
    worker.on(name, (job) => events.push(`${name} ${job.id}`));
  }
  await t.skiplock.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ kind: 'step', payload: { i } })));
  await worker.start();
  await waitFor(
    () => blocked !== undefined && worker.bufferedCount > 0,
    10_000,
    'a blocked handler and a buffer',
  );
  const [waiting] = await t.query<{ id: string; attempts: number }>(
    `SELECT id::text, attempts FROM ${t.jobs} WHERE status = 'running' AND id <> $1 ORDER BY id DESC LIMIT 1`,
    [blocked],
  );
  expect(await t.skiplock.cancel({ ids: [waiting!.id] })).toEqual({ cancelled: 0, running: 1 });

  await worker.stop();

  expect(await t.row(waiting!.id)).toEqual({
    status: 'cancelled',
    attempts: waiting!.attempts - 1,
    locked_by: null,
    last_error: null,
  });
  expect(events).toContain(`job:cancelled ${waiting!.id}`);
  expect(events).not.toContain(`job:released ${waiting!.id}`);
  expect(events).toContain(`job:released ${blocked}`);
});
