/**
 * Batch handlers (`handleBatch`): many jobs of a kind in one call, one outcome
 * per job, each job finished by its own outcome and fenced by its own lease.
 */
import { describe, expect, it } from 'vitest';
import { resolveBrokerWorkerOptions } from '../src/brokers/broker-worker.js';
import { type Job, PermanentError, SnoozeError, ValidationError, type Worker } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { resolveHandlers } from '../src/worker/handler-definition.js';
import { waitFor } from './support/database.js';
import { record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { waitForFreshLeases } from './support/leases.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000, onSuccess: 'keep' } as const;

interface BatchRow {
  id: string;
  status: string;
  attempts: number;
  last_error: string | null;
  /** Seconds from the database's now to run_at. */
  due_in_s: number;
}

async function rows(ids: string[]): Promise<Map<string, BatchRow>> {
  const found = await t.query<BatchRow>(
    `SELECT id::text, status, attempts, last_error,
            (EXTRACT(EPOCH FROM run_at - now()))::float8 AS due_in_s
       FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  return new Map(found.map((r) => [r.id, r]));
}

/** Waits until every job of `ids` is in the table and `done`; resolves with their rows. */
async function rowsOnce(
  ids: string[],
  done: (row: BatchRow) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<Map<string, BatchRow>> {
  return waitFor(
    async () => {
      const now = await rows(ids);
      return now.size === ids.length && [...now.values()].every(done) ? now : undefined;
    },
    timeoutMs,
    what,
    () => rows(ids),
  );
}

/** Waits until every job of `ids` was written: none running, none queued and due (as enqueued). */
function settled(ids: string[], timeoutMs = 30_000): Promise<Map<string, BatchRow>> {
  return rowsOnce(
    ids,
    (r) => r.status !== 'running' && !(r.status === 'queued' && r.due_in_s <= 0),
    'every job of the batch to be written',
    timeoutMs,
  );
}

/** Waits until every job of `ids` is dead. */
function dead(ids: string[]): Promise<Map<string, BatchRow>> {
  return rowsOnce(ids, (r) => r.status === 'dead', 'the jobs to be dead');
}

describe('a batch handler', () => {
  it('ends each job of a batch of mixed outcomes as a single handler would', async () => {
    const sizes: number[] = [];
    const worker = t.worker({
      ...base,
      handlers: {
        mixed: {
          maxBatchSize: 5,
          maxWaitMs: 10_000,
          backoff: 60_000,
          handleBatch: (jobs: Job<'mixed', { outcome: string }>[]) => {
            sizes.push(jobs.length);
            return jobs.map((job) => {
              switch (job.payload.outcome) {
                case 'value':
                  return { sent: true };
                case 'error':
                  return new Error('smtp 451');
                case 'permanent':
                  return new PermanentError('no such address');
                case 'snooze':
                  return new SnoozeError(30_000);
                default:
                  return undefined;
              }
            });
          },
        },
      },
    });
    const outcomes = ['value', 'error', 'permanent', 'snooze', 'undefined'];
    const ids = (
      await t.skiplock.enqueueMany(outcomes.map((outcome) => ({ kind: 'mixed', payload: { outcome } })))
    ).map((j) => j.id);
    await worker.start();
    const byId = await settled(ids);
    expect(sizes).toEqual([5]);
    const [value, error, permanent, snooze, none] = ids.map((id) => byId.get(id)!);
    expect(value).toMatchObject({ status: 'succeeded', attempts: 1, last_error: null });
    expect(none).toMatchObject({ status: 'succeeded', attempts: 1, last_error: null });
    expect(error).toMatchObject({ status: 'queued', attempts: 1 });
    expect(error!.last_error).toContain('smtp 451');
    expect(error!.due_in_s).toBeGreaterThan(40);
    expect(error!.due_in_s).toBeLessThanOrEqual(60);
    expect(permanent).toMatchObject({ status: 'failed', attempts: 1 });
    expect(permanent!.last_error).toContain('no such address');
    // A snooze does not charge the attempt.
    expect(snooze).toMatchObject({ status: 'queued', attempts: 0 });
    expect(snooze!.due_in_s).toBeGreaterThan(10);
    expect(snooze!.due_in_s).toBeLessThanOrEqual(30);
  });

  it('fails every job of a batch that throws, each charged its attempt', async () => {
    const worker = t.worker({
      ...base,
      handlers: {
        broken: {
          maxAttempts: 1,
          maxBatchSize: 3,
          maxWaitMs: 10_000,
          handleBatch: () => {
            throw new Error('bulk api down');
          },
        },
      },
    });
    const ids = (
      await t.skiplock.enqueueMany([1, 2, 3].map((n) => ({ kind: 'broken', payload: { n } })))
    ).map((j) => j.id);
    await worker.start();
    const byId = await dead(ids);
    for (const id of ids) {
      expect(byId.get(id)).toMatchObject({ status: 'dead', attempts: 1 });
      expect(byId.get(id)!.last_error).toContain('bulk api down');
    }
  });

  it('reads the holes of a sparse array of outcomes as successes (only the failures filled in)', async () => {
    const worker = t.worker({
      ...base,
      concurrency: 1,
      handlers: {
        sparse: {
          maxAttempts: 1,
          maxBatchSize: 3,
          maxWaitMs: 50,
          handleBatch: (jobs: Job[]) => {
            const outcomes = new Array<Error | undefined>(jobs.length);
            const bounced = jobs.findIndex((job) => (job.payload as { n: number }).n === 2);
            if (bounced >= 0) outcomes[bounced] = new PermanentError('the second one bounced');
            return outcomes;
          },
        },
        single: () => 'after',
      },
    });
    const ids = (
      await t.skiplock.enqueueMany([1, 2, 3].map((n) => ({ kind: 'sparse', payload: { n }, priority: 1 })))
    ).map((j) => j.id);
    const [after] = await t.skiplock.enqueueMany([{ kind: 'single', payload: {} }]);
    await worker.start();
    const byId = await settled([...ids, after!.id]);
    expect(ids.map((id) => byId.get(id)!.status)).toEqual(['succeeded', 'failed', 'succeeded']);
    expect(byId.get(ids[1]!)!.last_error).toContain('the second one bounced');
    // The batch's slot was freed: a job after it ran.
    expect(byId.get(after!.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('fails every job, with a clear error, when it returns the wrong number of outcomes', async () => {
    const worker = t.worker({
      ...base,
      handlers: {
        short: { maxAttempts: 1, maxBatchSize: 2, maxWaitMs: 10_000, handleBatch: async () => [undefined] },
      },
    });
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'short', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    const byId = await dead(ids);
    for (const id of ids)
      expect(byId.get(id)!.last_error).toContain(
        'handleBatch must return one outcome per job: 2 jobs, 1 outcomes',
      );
  });

  it('ends each job by its own outcome even when the handler reorders or empties its array', async () => {
    const worker = t.worker({
      ...base,
      handlers: {
        sorted: {
          maxAttempts: 1,
          maxBatchSize: 3,
          maxWaitMs: 10_000,
          handleBatch: (jobs: Job<'sorted', { n: number }>[]) => {
            jobs.sort((a, b) => b.payload.n - a.payload.n);
            const outcomes = jobs.map((job) =>
              job.payload.n === 1 ? new PermanentError('bad 1') : `ok ${job.payload.n}`,
            );
            // The outcomes are in the order of the array as it was given.
            outcomes.reverse();
            jobs.length = 0;
            return outcomes;
          },
        },
      },
    });
    const ids = (
      await t.skiplock.enqueueMany([1, 2, 3].map((n) => ({ kind: 'sorted', payload: { n } })))
    ).map((j) => j.id);
    await worker.start();
    const byId = await settled(ids);
    expect(ids.map((id) => byId.get(id)!.status)).toEqual(['failed', 'succeeded', 'succeeded']);
    expect(byId.get(ids[0]!)!.last_error).toContain('bad 1');
    const results = await t.query<{ result: string }>(
      `SELECT result #>> '{}' AS result FROM ${t.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids.slice(1)],
    );
    expect(results).toEqual([{ result: 'ok 2' }, { result: 'ok 3' }]);
  });

  it('ends every job of the batch as a success when a middleware does not call next, as drain() does', async () => {
    let calls = 0;
    const handlers = {
      skipped: {
        maxAttempts: 1,
        maxBatchSize: 2,
        maxWaitMs: 10_000,
        handleBatch: (jobs: Job[]) => {
          calls++;
          return jobs.map(() => 'ran');
        },
      },
    };
    const middleware = [async () => undefined];
    const worker = t.worker({ ...base, middleware, handlers });
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'skipped', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    const byId = await settled(ids);
    expect(ids.map((id) => byId.get(id)!.status)).toEqual(['succeeded', 'succeeded']);
    await worker.stop();
    const [id] = (await t.skiplock.enqueueMany([{ kind: 'skipped', payload: { n: 3 } }])).map((j) => j.id);
    const drained = await drain(t.skiplock, handlers, { middleware, onSuccess: 'keep' });
    expect(drained).toMatchObject({ succeeded: 1 });
    expect((await rows([id!])).get(id!)).toMatchObject({ status: 'succeeded' });
    expect(calls).toBe(0);
  });

  it("drain() gives a batch handler's context the worker's parents(): a rejection (code USAGE), not the parents", async () => {
    const [parent] = await t.skiplock.enqueueMany([
      { kind: 'parent', payload: {}, ref: 'p' },
      { kind: 'child', payload: {}, dependsOn: ['p'] },
    ]);
    const seen: unknown[] = [];
    await drain(t.skiplock, {
      parent: () => 1,
      child: {
        maxBatchSize: 2,
        maxWaitMs: 10,
        handleBatch: async (jobs, context) => {
          // Not in BatchContext's type; JavaScript callers reach it all the same.
          const { parents } = context as unknown as { parents(): Promise<unknown> };
          seen.push(await parents().catch((error: unknown) => error));
          return jobs.map(() => undefined);
        },
      },
    });
    expect(parent).toBeDefined();
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ name: 'SkiplockError', code: 'USAGE' });
  });

  it('gathers jobs that arrive while it waits, and runs as soon as it is full', async () => {
    const sizes: number[] = [];
    const worker = t.worker({
      ...base,
      handlers: {
        gathered: {
          maxBatchSize: 3,
          // Far beyond the test's deadline: only a full batch runs in time.
          maxWaitMs: 60_000,
          handleBatch: async (jobs) => {
            sizes.push(jobs.length);
            return jobs.map(() => undefined);
          },
        },
      },
    });
    await worker.start();
    const first = await t.skiplock.enqueue('gathered', { n: 1 });
    await waitFor(async () => (await t.row(first.id))?.status === 'running', 30_000, 'the first job claimed');
    expect(sizes).toEqual([]);
    const late = await t.skiplock.enqueueMany([2, 3].map((n) => ({ kind: 'gathered', payload: { n } })));
    const byId = await settled([first.id, ...late.map((j) => j.id)]);
    expect(sizes).toEqual([3]);
    for (const row of byId.values()) expect(row).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('never runs more than maxBatchSize jobs at once, and runs each job once', async () => {
    const sizes: number[] = [];
    const seen = new Set<string>();
    let repeated = 0;
    const worker = t.worker({
      ...base,
      onSuccess: 'delete',
      concurrency: 2,
      batchSize: 250,
      prefetch: 250,
      handlers: {
        bulk: {
          maxBatchSize: 100,
          handleBatch: async (jobs) => {
            sizes.push(jobs.length);
            for (const job of jobs) {
              if (seen.has(job.id)) repeated++;
              seen.add(job.id);
            }
            return jobs.map(() => undefined);
          },
        },
      },
    });
    await t.skiplock.enqueueMany(Array.from({ length: 250 }, (_, n) => ({ kind: 'bulk', payload: { n } })));
    await worker.start();
    await waitFor(
      async () => (await t.jobCount()) === 0,
      30_000,
      'every job to succeed',
      () => t.jobCount(),
    );
    expect(Math.max(...sizes)).toBeLessThanOrEqual(100);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(250);
    expect(seen.size).toBe(250);
    expect(repeated).toBe(0);
  });

  it('does not write a job whose lease was taken while its batch ran; the others are written', async () => {
    const worker = t.worker({
      ...base,
      handlers: {
        fenced: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: async (jobs) => {
            // Another worker's lease now (as after a reclaim and a new claim).
            await t.query(
              `UPDATE ${t.jobs} SET lease_seq = lease_seq + 1, locked_by = 'someone-else' WHERE id = $1`,
              [jobs[0]!.id],
            );
            return [undefined, undefined];
          },
        },
      },
    });
    const stale = record(worker, 'job:stale');
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'fenced', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    await waitFor(() => stale.length === 1, 30_000, 'the stale job to be reported');
    expect(stale[0]![0].id).toBe(ids[0]);
    const byId = await settled([ids[1]!]);
    expect(byId.get(ids[1]!)).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(await t.row(ids[0]!)).toEqual({
      status: 'running',
      attempts: 1,
      locked_by: 'someone-else',
      last_error: null,
    });
  });

  it('ends a job cancelled while its batch runs at once, as cancelled; the others by their outcomes', async () => {
    const cancelled = gate();
    const worker = t.worker({
      ...base,
      handlers: {
        slow: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: async (jobs) => {
            await t.skiplock.cancel({ ids: [jobs[0]!.id] });
            await cancelled.opened;
            return [undefined, undefined];
          },
        },
      },
    });
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'slow', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    await waitFor(
      async () => (await t.row(ids[0]!))?.status === 'cancelled',
      30_000,
      'the cancel',
      () => t.row(ids[0]!),
    );
    expect((await t.row(ids[1]!))?.status).toBe('running');
    cancelled.open();
    const byId = await settled([ids[1]!]);
    expect(byId.get(ids[1]!)).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect((await t.row(ids[0]!))?.status).toBe('cancelled');
  });

  it('keeps every job of a long batch leased past the visibility timeout', async () => {
    const visibilityTimeoutMs = 2000;
    const release = gate();
    const started = gate<number>();
    const worker = t.worker({
      ...base,
      visibilityTimeoutMs,
      heartbeatIntervalMs: 100,
      sweepIntervalMs: 100,
      handlers: {
        long: {
          maxBatchSize: 3,
          maxWaitMs: 10_000,
          handleBatch: async (jobs) => {
            started.open(Date.now());
            await release.opened;
            return jobs.map(() => undefined);
          },
        },
      },
    });
    const ids = (await t.skiplock.enqueueMany([1, 2, 3].map((n) => ({ kind: 'long', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    const startedAt = await started.opened;
    // Running for longer than the visibility timeout, yet every lease was just refreshed.
    const fresh = await waitForFreshLeases(
      t,
      ids,
      startedAt,
      visibilityTimeoutMs,
      'the batch to outlive its visibility timeout with fresh leases',
    );
    expect(fresh.map((r) => [r.status, r.attempts])).toEqual([
      ['running', 1],
      ['running', 1],
      ['running', 1],
    ]);
    release.open();
    const byId = await settled(ids);
    for (const id of ids) expect(byId.get(id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('is waited for by stop like any handler', async () => {
    const started = gate();
    const finish = gate();
    const worker = t.worker({
      ...base,
      shutdownTimeoutMs: 20_000,
      handlers: {
        held: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: async (jobs) => {
            started.open();
            await finish.opened;
            return jobs.map(() => 'done');
          },
        },
      },
    });
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'held', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    await started.opened;
    const stopping = worker.stop();
    finish.open();
    await stopping;
    const byId = await rows(ids);
    for (const id of ids) expect(byId.get(id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('is not waited for by a stop() it calls before its first await: its jobs end by its outcomes', async () => {
    const stopped = gate();
    const worker: Worker = t.worker({
      ...base,
      shutdownTimeoutMs: 20_000,
      handlers: {
        stopper: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: async (jobs) => {
            await worker.stop();
            stopped.open();
            return jobs.map(() => 'done');
          },
        },
      },
    });
    const ids = (await t.skiplock.enqueueMany([1, 2].map((n) => ({ kind: 'stopper', payload: { n } })))).map(
      (j) => j.id,
    );
    await worker.start();
    // An ordinary stop would wait for the handler until shutdownTimeoutMs (20 s), then give the jobs back.
    await stopped.opened;
    const byId = await settled(ids, 10_000);
    for (const id of ids) expect(byId.get(id)).toMatchObject({ status: 'succeeded', attempts: 1 });
    await worker.stop();
  });

  it('runs in drain(), one job per call', async () => {
    const sizes: number[] = [];
    await t.skiplock.enqueueMany([
      { kind: 'drained', payload: { ok: true } },
      { kind: 'drained', payload: { ok: false } },
    ]);
    const result = await drain(t.skiplock, {
      drained: {
        maxAttempts: 1,
        handleBatch: (jobs: Job<'drained', { ok: boolean }>[]) => {
          sizes.push(jobs.length);
          return jobs.map((job) => (job.payload.ok ? undefined : new PermanentError('bad')));
        },
      },
    });
    expect(sizes).toEqual([1, 1]);
    expect(result.jobs.map((j) => j.status)).toEqual(['succeeded', 'failed']);
  });

  it("stores each job's value as its result, as a single handler's: on a kept row, and for the job's children", async () => {
    const [kept, parent] = await t.skiplock.enqueueMany([
      { kind: 'valued', payload: { n: 1 }, onSuccess: 'keep' },
      { kind: 'valued', payload: { n: 2 }, ref: 'p' },
      { kind: 'child', payload: {}, dependsOn: ['p'] },
    ]);
    let seen: unknown;
    const worker = t.worker({
      pollIntervalMs: 100,
      handlers: {
        valued: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: (jobs: Job<'valued', { n: number }>[]) =>
            jobs.map((job) => ({ doubled: job.payload.n * 2 })),
        },
        child: async (_job: Job, context) => {
          seen = await context.parents();
        },
      },
    });
    await worker.start();
    await waitFor(() => seen !== undefined, 30_000, 'the child to run');
    expect(seen).toEqual([{ id: parent!.id, kind: 'valued', status: 'succeeded', result: { doubled: 4 } }]);
    expect(await t.skiplock.getJob(kept!.id)).toMatchObject({ status: 'succeeded', result: { doubled: 2 } });
  });

  it("stores each job's value as its result under drain too", async () => {
    const job = await t.skiplock.enqueue('valued', { n: 3 });
    await drain(
      t.skiplock,
      {
        valued: {
          handleBatch: (jobs: Job<'valued', { n: number }>[]) =>
            jobs.map((j) => ({ doubled: j.payload.n * 2 })),
        },
      },
      { onSuccess: 'keep' },
    );
    expect(await t.skiplock.getJob(job.id)).toMatchObject({ status: 'succeeded', result: { doubled: 6 } });
  });
});

describe('batch handler options', () => {
  const resolve = (entry: unknown) => resolveHandlers({ bulk: entry }, 'worker.handlers');
  const handleBatch = async () => [];

  it('fills in maxBatchSize 100 and maxWaitMs 0', () => {
    const handler = resolve({ handleBatch }).get('bulk')!;
    expect(handler.transactional).toBe(false);
    expect(handler.transactional === false && handler.batch).toEqual({
      handleBatch,
      maxBatchSize: 100,
      maxWaitMs: 0,
    });
  });

  it.each([
    [{ handleBatch, maxBatchSize: 0 }, 'worker.handlers.bulk.maxBatchSize', 'must be ≥ 1'],
    [{ handleBatch, maxBatchSize: 1001 }, 'worker.handlers.bulk.maxBatchSize', 'must be ≤ 1000'],
    [{ handleBatch, maxBatchSize: 2.5 }, 'worker.handlers.bulk.maxBatchSize', 'must be an integer'],
    [{ handleBatch, maxWaitMs: -1 }, 'worker.handlers.bulk.maxWaitMs', 'must be ≥ 0'],
    [{ handleBatch, maxWaitMs: 60_001 }, 'worker.handlers.bulk.maxWaitMs', 'must be ≤ 60000'],
    [{ handleBatch: 'x' }, 'worker.handlers.bulk.handleBatch', 'must be a function'],
    [{ handleBatch, transactional: true }, 'worker.handlers.bulk.transactional', 'cannot be transactional'],
    [{ handleBatch, handle: handleBatch }, 'worker.handlers.bulk.handle', 'not both'],
  ])('refuses %o naming the field', (entry, field, message) => {
    const thrown = (() => {
      try {
        resolve(entry);
      } catch (error) {
        return error;
      }
      return undefined;
    })();
    expect(thrown).toBeInstanceOf(ValidationError);
    expect((thrown as ValidationError).field).toBe(field);
    expect((thrown as ValidationError).message).toContain(message);
  });

  it('is refused by broker-side workers', () => {
    expect(() =>
      resolveBrokerWorkerOptions({ handlers: { bulk: { handleBatch } } } as never, 'natsWorker'),
    ).toThrow(/natsWorker\.handlers\.bulk.*batch handlers \(handleBatch\) run only in PostgreSQL workers/);
    // Handlers that are no object at all are named as a field too, not a TypeError.
    expect(() => resolveBrokerWorkerOptions({ handlers: null } as never, 'natsWorker')).toThrow(
      expect.objectContaining({ field: 'natsWorker.handlers' }),
    );
  });
});
