import { describe, expect, it } from 'vitest';
import { PermanentError } from '../src/index.js';
import { waitFor } from './support/database.js';
import { eventOf, nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const fast = { pollIntervalMs: 200 } as const;

/** A started worker on `queue` whose one handler, for `kind`, throws `error`. */
async function throwingWorker(queue: string, kind: string, error: Error) {
  const worker = t.worker({
    ...fast,
    queues: [queue],
    handlers: {
      [kind]: () => {
        throw error;
      },
    },
  });
  await worker.start();
  return worker;
}

describe('worker', () => {
  it('runs an enqueued job once and deletes it on success', async () => {
    const seen: unknown[] = [];
    const worker = t.worker({
      ...fast,
      queues: ['q-delete'],
      handlers: {
        greet: async (job) => {
          seen.push({ payload: job.payload, attempts: job.attempts, kind: job.kind, queue: job.queue });
        },
      },
    });
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await t.skiplock.enqueue(
      'greet',
      { name: 'Ada', n: [1, 2, { x: null }] },
      { queue: 'q-delete' },
    );
    const [done] = await succeeded;
    expect(done.id).toBe(job.id);
    expect(seen).toEqual([
      { payload: { name: 'Ada', n: [1, 2, { x: null }] }, attempts: 1, kind: 'greet', queue: 'q-delete' },
    ]);
    expect(await t.jobCount('id = $1', [job.id])).toBe(0);
  });

  it('retries with backoff, then dead letters after maxAttempts', async () => {
    const worker = await throwingWorker('q-retry', 'flaky', new Error('boom'));
    const [job, [, , first]] = await eventOf(worker, 'job:failure', () =>
      t.skiplock.enqueue('flaky', {}, { queue: 'q-retry', maxAttempts: 2 }),
    );
    expect(first.status).toBe('queued');
    expect(first.retryDelayMs).toBeGreaterThanOrEqual(900);
    expect(first.retryDelayMs).toBeLessThanOrEqual(2000);
    const [row] = await t.query(
      `SELECT status, attempts, last_error, run_at - now() AS d FROM ${t.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(row?.status).toBe('queued');
    expect(row?.attempts).toBe(1);
    expect(row?.last_error).toMatch(/^Error: boom/);
    // Make the retry due now instead of waiting out the backoff.
    const failedAgain = nextEvent(worker, 'job:failure');
    await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [job.id]);
    const [, , second] = await failedAgain;
    expect(second.status).toBe('dead');
    const [dead] = await t.query(
      `SELECT status, attempts, finished_at IS NOT NULL AS finished FROM ${t.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(dead).toEqual({ status: 'dead', attempts: 2, finished: true });
  });

  it('ends a job as failed on PermanentError', async () => {
    const worker = await throwingWorker('q-perm', 'nope', new PermanentError('order does not exist'));
    const [job, [, , outcome]] = await eventOf(worker, 'job:failure', () =>
      t.skiplock.enqueue('nope', {}, { queue: 'q-perm' }),
    );
    expect(outcome.status).toBe('failed');
    const [row] = await t.query(`SELECT status, attempts, last_error FROM ${t.jobs} WHERE id = $1`, [job.id]);
    expect(row?.status).toBe('failed');
    expect(row?.attempts).toBe(1);
    expect(row?.last_error).toContain('PermanentError: order does not exist');
  });

  it('drains many jobs with concurrency', async () => {
    let count = 0;
    const worker = t.worker({
      ...fast,
      queues: ['q-many'],
      concurrency: 20,
      handlers: { inc: () => void count++ },
    });
    await t.skiplock.enqueueMany(
      Array.from({ length: 500 }, (_, i) => ({ kind: 'inc', payload: { i }, queue: 'q-many' })),
    );
    await worker.start();
    await waitFor(
      () => count === 500,
      20_000,
      '500 jobs',
      () => `${count} ran`,
    );
    // Deleted on success: once their results are written, none is left.
    await waitFor(
      async () => (await t.jobCount()) === 0,
      10_000,
      'the 500 results to be written',
      () => t.query(`SELECT status, count(*)::int AS n FROM ${t.jobs} GROUP BY status`),
    );
    expect(count).toBe(500);
  });
});

describe('PermanentError from another copy of the module', () => {
  it('is recognised by name and code', async () => {
    class PermanentError extends Error {
      readonly code = 'PERMANENT';
      override name = 'PermanentError';
    }
    const worker = await throwingWorker(
      'q-perm-copy',
      'nope',
      new PermanentError('from another module instance'),
    );
    const [, [, , outcome]] = await eventOf(worker, 'job:failure', () =>
      t.skiplock.enqueue('nope', {}, { queue: 'q-perm-copy' }),
    );
    expect(outcome.status).toBe('failed');
  });
});
