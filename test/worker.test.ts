import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PermanentError, type Skiplock } from '../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

const fast = { handleSignals: false, pollIntervalMs: 200 } as const;

describe('worker', () => {
  it('runs an enqueued job once and deletes it on success', async () => {
    const seen: unknown[] = [];
    const worker = skiplock.worker({
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
    const job = await skiplock.enqueue(
      'greet',
      { name: 'Ada', n: [1, 2, { x: null }] },
      { queue: 'q-delete' },
    );
    const [done] = await succeeded;
    expect(done.id).toBe(job.id);
    expect(seen).toEqual([
      { payload: { name: 'Ada', n: [1, 2, { x: null }] }, attempts: 1, kind: 'greet', queue: 'q-delete' },
    ]);
    expect(await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE id = $1`, [job.id])).toEqual([
      { n: 0 },
    ]);
    await worker.stop();
  });

  it('retries with backoff, then dead letters after maxAttempts', async () => {
    const worker = skiplock.worker({
      ...fast,
      queues: ['q-retry'],
      handlers: {
        flaky: () => {
          throw new Error('boom');
        },
      },
    });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    const job = await skiplock.enqueue('flaky', {}, { queue: 'q-retry', maxAttempts: 2 });
    const [, , first] = await failed;
    expect(first.status).toBe('queued');
    expect(first.retryDelayMs).toBeGreaterThanOrEqual(900);
    expect(first.retryDelayMs).toBeLessThanOrEqual(2000);
    const [row] = await db.query(
      `SELECT status, attempts, last_error, run_at - now() AS d FROM ${db.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(row?.status).toBe('queued');
    expect(row?.attempts).toBe(1);
    expect(row?.last_error).toMatch(/^Error: boom/);
    // Make the retry due now instead of waiting out the backoff.
    const failedAgain = nextEvent(worker, 'job:failure');
    await db.query(`UPDATE ${db.jobs} SET run_at = now() WHERE id = $1`, [job.id]);
    const [, , second] = await failedAgain;
    expect(second.status).toBe('dead');
    const [dead] = await db.query(
      `SELECT status, attempts, finished_at IS NOT NULL AS finished FROM ${db.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(dead).toEqual({ status: 'dead', attempts: 2, finished: true });
    await worker.stop();
  });

  it('ends a job as failed on PermanentError', async () => {
    const worker = skiplock.worker({
      ...fast,
      queues: ['q-perm'],
      handlers: {
        nope: () => {
          throw new PermanentError('order does not exist');
        },
      },
    });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    const job = await skiplock.enqueue('nope', {}, { queue: 'q-perm' });
    const [, , outcome] = await failed;
    expect(outcome.status).toBe('failed');
    const [row] = await db.query(`SELECT status, attempts, last_error FROM ${db.jobs} WHERE id = $1`, [
      job.id,
    ]);
    expect(row?.status).toBe('failed');
    expect(row?.attempts).toBe(1);
    expect(row?.last_error).toContain('PermanentError: order does not exist');
    await worker.stop();
  });

  it('drains many jobs with concurrency', async () => {
    let count = 0;
    const worker = skiplock.worker({
      ...fast,
      queues: ['q-many'],
      concurrency: 20,
      handlers: { inc: () => void count++ },
    });
    await skiplock.enqueueMany(
      Array.from({ length: 500 }, (_, i) => ({ kind: 'inc', payload: { i }, queue: 'q-many' })),
    );
    await worker.start();
    await waitFor(() => count === 500, 20_000, '500 jobs');
    await waitFor(
      async () =>
        (await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'q-many'`))[0]?.n === 0,
    );
    await worker.stop();
  });
});

describe('PermanentError from another copy of the module', () => {
  it('is recognised by name and code', async () => {
    class PermanentError extends Error {
      readonly code = 'PERMANENT';
      override name = 'PermanentError';
    }
    const worker = skiplock.worker({
      ...fast,
      queues: ['q-perm-copy'],
      handlers: {
        nope: () => {
          throw new PermanentError('from another module instance');
        },
      },
    });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    await skiplock.enqueue('nope', {}, { queue: 'q-perm-copy' });
    const [, , outcome] = await failed;
    expect(outcome.status).toBe('failed');
    await worker.stop();
  });
});
