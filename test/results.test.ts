/** Results, per-job success policies, maxResultBytes, and the handler's progress and log lines. */
import { describe, expect, it } from 'vitest';
import type { Queryable } from '../src/db/executor.js';
import { FinishQueries } from '../src/db/queries/finish.js';
import { schemaNames } from '../src/db/queries/schema-names.js';
import { type Job, PermanentError, type TransactionalHandlerContext, ValidationError } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { waitFor } from './support/database.js';
import { nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { reclaim } from './support/leases.js';

const t = useTestDatabase();

/** Runs one job of kind `r` whose handler returns `value`; resolves once its success was written. */
async function succeed(
  value: unknown,
  workerPolicy: 'delete' | 'keep' | 'archive',
  jobPolicy?: 'delete' | 'keep' | 'archive',
) {
  const worker = t.worker({ pollIntervalMs: 100, onSuccess: workerPolicy, handlers: { r: () => value } });
  await worker.start();
  const succeeded = nextEvent(worker, 'job:success');
  const job = await t.skiplock.enqueue('r', {}, jobPolicy ? { onSuccess: jobPolicy } : {});
  await succeeded;
  await worker.stop();
  const hot = await t.query(`SELECT status, result FROM ${t.jobs} WHERE id = $1`, [job.id]);
  const archived = await t.query(`SELECT status, result FROM ${t.archive} WHERE id = $1`, [job.id]);
  return { id: job.id, hot, archived };
}

describe('results', () => {
  it('stores the return value of a kept job', async () => {
    const { id, hot } = await succeed({ total: 42, items: ['a'] }, 'keep');
    expect(hot).toEqual([{ status: 'succeeded', result: { total: 42, items: ['a'] } }]);
    const job = await t.skiplock.getJob(id);
    expect(job?.result).toEqual({ total: 42, items: ['a'] });
  });

  it('stores the return value of an archived job in the archive', async () => {
    const { hot, archived } = await succeed('done', 'archive');
    expect({ hot, archived }).toEqual({ hot: [], archived: [{ status: 'succeeded', result: 'done' }] });
  });

  it('stores nothing for a deleted job, and null for a kept job that returned nothing', async () => {
    expect((await succeed({ big: 'x'.repeat(10) }, 'delete')).hot).toEqual([]);
    expect((await succeed(undefined, 'keep')).hot).toEqual([{ status: 'succeeded', result: null }]);
  });

  it("follows the job's own onSuccess over the worker's", async () => {
    expect((await succeed(7, 'delete', 'keep')).hot).toEqual([{ status: 'succeeded', result: 7 }]);
    const archived = await succeed(8, 'delete', 'archive');
    expect(archived.archived).toEqual([{ status: 'succeeded', result: 8 }]);
    expect((await succeed(9, 'keep', 'delete')).hot).toEqual([]);
  });

  it('writes a batch of mixed policies and outcomes in one statement', async () => {
    const worker = t.worker({
      pollIntervalMs: 100,
      concurrency: 10,
      onSuccess: 'delete',
      handlers: {
        r: (job) => (job.payload as { n: number }).n,
        f: () => {
          throw new Error('no');
        },
      },
    });
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'r', payload: { n: 1 } },
      { kind: 'r', payload: { n: 2 }, onSuccess: 'keep' },
      { kind: 'r', payload: { n: 3 }, onSuccess: 'archive' },
      { kind: 'f', payload: {}, maxAttempts: 1 },
    ]);
    await worker.start();
    await waitFor(
      async () => (await t.jobCount("status IN ('queued', 'running')")) === 0,
      20_000,
      'all jobs ended',
    );
    const rows = await t.query(
      `SELECT id, status, result FROM ${t.jobs} UNION ALL SELECT id, 'archived:' || status, result FROM ${t.archive} ORDER BY id`,
    );
    expect(rows).toEqual([
      { id: jobs[1]!.id, status: 'succeeded', result: 2 },
      { id: jobs[2]!.id, status: 'archived:succeeded', result: 3 },
      { id: jobs[3]!.id, status: 'dead', result: null },
    ]);
  });

  it("stores a transactional handler's result and progress, by the job's own policy", async () => {
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'delete',
      handlers: {
        tx: {
          transactional: true,
          handle: async (_job, { client, progress }: TransactionalHandlerContext) => {
            await client.query('SELECT 1');
            expect(await progress('half')).toBe(true);
            return { rows: 1 };
          },
        },
      },
    });
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await t.skiplock.enqueue('tx', {}, { onSuccess: 'keep' });
    await succeeded;
    const shown = await t.skiplock.getJob(job.id);
    expect({ status: shown?.status, result: shown?.result, progress: shown?.progress }).toEqual({
      status: 'succeeded',
      result: { rows: 1 },
      progress: 'half',
    });
  });

  it('a transactional handler that enqueued a child of its own job: progress() does not wait for its own lock', async () => {
    const reported: boolean[] = [];
    const worker = t.worker({
      pollIntervalMs: 100,
      statementTimeoutMs: 60_000,
      onSuccess: 'keep',
      handlers: {
        tx: {
          transactional: true,
          handle: async (job: Job, { client, progress }: TransactionalHandlerContext) => {
            await t.skiplock.enqueue('child', {}, { client, dependsOn: [job.id] });
            reported.push(await progress('locked by my own transaction'));
            return 'parent';
          },
        },
        child: () => 'child',
      },
    });
    const errors = record(worker, 'error');
    await worker.start();
    const job = await t.skiplock.enqueue('tx', {});
    await waitFor(async () => (await t.jobCount("status = 'succeeded'")) === 2, 30_000, 'parent and child');
    expect(reported).toEqual([false]);
    expect(errors).toEqual([]);
    expect((await t.skiplock.getJob(job.id))?.result).toBe('parent');
  });

  it("drain() stores results by the job's own policy, as a worker does", async () => {
    const kept = await t.skiplock.enqueue('r', { n: 4 }, { onSuccess: 'keep' });
    const deleted = await t.skiplock.enqueue('r', { n: 5 });
    const drained = await drain(t.skiplock, { r: (job: Job) => (job.payload as { n: number }).n * 2 });
    expect(drained.succeeded).toBe(2);
    expect(drained.jobs.map((j) => Object.keys(j.job).includes('onSuccess'))).toEqual([false, false]);
    expect(await t.query(`SELECT id, status, result FROM ${t.jobs}`)).toEqual([
      { id: kept.id, status: 'succeeded', result: 8 },
    ]);
    expect(await t.skiplock.getJob(deleted.id)).toBeUndefined();
  });

  it('fails the attempt, naming the field, when the result is larger than maxResultBytes or not JSON', async () => {
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'keep',
      maxResultBytes: 100,
      handlers: { big: () => 'x'.repeat(200), odd: () => ({ n: 10n }) },
    });
    await worker.start();
    const big = await t.skiplock.enqueue('big', {}, { maxAttempts: 1 });
    const odd = await t.skiplock.enqueue('odd', {}, { maxAttempts: 1 });
    await waitFor(async () => (await t.jobCount("status = 'dead'")) === 2, 20_000, 'both jobs dead');
    const firstLine = async (id: string) => (await t.row(id))?.last_error?.split('\n')[0];
    expect(await firstLine(big.id)).toBe(
      'ValidationError: invalid result: is 202 bytes of JSON, more than maxResultBytes',
    );
    expect(await firstLine(odd.id)).toMatch(/^ValidationError: invalid result(\.n)?: /);
  });

  it('writes a result PostgreSQL refuses as a failure that says why; the results beside it are written', async () => {
    // A getter that passes the worker's check, then yields what jsonb cannot hold.
    const shifty = () => {
      let reads = 0;
      return {
        get v() {
          return reads++ === 0 ? 'fine' : 'a\u0000b';
        },
      };
    };
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'keep',
      visibilityTimeoutMs: 600_000,
      handlers: { shifty, plain: (job: Job) => ({ n: (job.payload as { n: number }).n }) },
    });
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'shifty', payload: {}, maxAttempts: 1 },
      ...[1, 2, 3].map((n) => ({ kind: 'plain', payload: { n } })),
    ]);
    await worker.start();
    const ids = jobs.map((j) => j.id);
    await waitFor(
      async () => (await t.jobCount("status IN ('dead', 'succeeded')")) === 4,
      20_000,
      'every job written (none left to the sweeper)',
    );
    const rows = await t.query<{ status: string; last_error: string | null; result: unknown }>(
      `SELECT status, last_error, result FROM ${t.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [ids],
    );
    expect(rows.slice(1)).toEqual(
      [1, 2, 3].map((n) => ({ status: 'succeeded', last_error: null, result: { n } })),
    );
    expect(rows[0]).toMatchObject({ status: 'dead', result: null });
    expect(rows[0]!.last_error).toMatch(/^its outcome could not be stored: /);
  });

  it('sends exactly the plain statement for successes without results or per-job policies', async () => {
    const sent: string[] = [];
    const recording: Queryable = {
      query: (text: string, values?: unknown[]) => {
        sent.push(text);
        return t.db.pool.query(text, values);
      },
    };
    const finish = new FinishQueries(schemaNames(t.schema));
    const lease = { id: '1', attempts: 1, leaseSeq: '1' };
    for (const policy of ['delete', 'keep', 'archive'] as const)
      await finish.finish(recording, [{ ...lease, outcome: 'succeeded' }], 'w', policy);
    await finish.finish(recording, [{ ...lease, outcome: 'succeeded', onSuccess: 'keep' }], 'w', 'keep');
    // Job 1 does not exist, so after the delete and the archive the statement that keeps parents
    // for their children is sent too (it is only for the successes the first one did not write).
    const kept = (text: string) => text.startsWith(`UPDATE ${t.jobs} j SET status = 'succeeded'`);
    expect(sent.map(kept)).toEqual([false, true, false, false, true, false]);
    const plain = sent.filter((text) => !kept(text));
    expect(plain.every((text) => !/result|on_success/.test(text))).toBe(true);
    expect(plain[3]).toBe(plain[1]);
    expect(plain[0]).toBe(
      `WITH succeeded AS (DELETE FROM ${t.jobs} j WHERE j.id = ANY(ARRAY(SELECT unnest($1::bigint[]))) AND j.status = 'running' AND j.locked_by = $3
             AND (j.id::text || '/' || j.attempts::text || '/' || j.lease_seq::text) = ANY($2::text[]) AND j.cancel_requested_at IS NULL AND NOT j.has_children RETURNING j.id),
succeeded_not AS (
       SELECT u.id, NULL::bigint AS lease_seq, 'unwritten'::text AS outcome, NULL::text AS queue,
              0::float8 AS retry_delay_ms
       FROM unnest(CASE WHEN (SELECT count(*) FROM succeeded) = cardinality($1::bigint[]) THEN '{}'::bigint[]
              ELSE ARRAY(SELECT unnest($1::bigint[]) EXCEPT ALL (SELECT id FROM succeeded)) END) AS u(id)),
cancelled AS (
       UPDATE ${t.jobs} j SET status = 'cancelled', locked_at = NULL, locked_by = NULL, finished_at = now()
       WHERE j.id = ANY(ARRAY(SELECT unnest(CASE WHEN (SELECT count(*) FROM succeeded) = cardinality($1::bigint[]) THEN '{}'::bigint[]
              ELSE ARRAY(SELECT unnest($1::bigint[]) EXCEPT ALL (SELECT id FROM succeeded)) END))) AND j.status = 'running' AND j.locked_by = $3
             AND (j.id::text || '/' || j.attempts::text || '/' || j.lease_seq::text) = ANY($2::text[]) AND j.cancel_requested_at IS NOT NULL
       RETURNING j.id, j.lease_seq, 'cancelled'::text AS outcome, j.queue, 0::float8 AS retry_delay_ms)
SELECT * FROM succeeded_not UNION ALL SELECT * FROM cancelled`,
    );
  });
});

describe('progress and log lines', () => {
  it('shows progress and the newest log lines in getJob, emits job:progress, and coalesces a tight loop', async () => {
    const hold = gate();
    const reported = gate<boolean[]>();
    const worker = t.worker({
      pollIntervalMs: 100,
      handlers: {
        p: async (_job, { progress, log }) => {
          const writes: Promise<boolean>[] = [];
          for (let i = 1; i <= 1000; i++) writes.push(progress({ done: i, total: 1000 }));
          for (let i = 1; i <= 60; i++) writes.push(log(`line ${i}`));
          writes.push(log('y'.repeat(1500)));
          reported.open(await Promise.all(writes));
          await hold.opened;
        },
      },
    });
    const events: unknown[] = [];
    worker.on('job:progress', (_job, info) => events.push(info));
    await worker.start();
    const job = await t.skiplock.enqueue('p', {});
    expect(new Set(await reported.opened)).toEqual(new Set([true]));
    const shown = await t.skiplock.getJob(job.id);
    expect(shown?.progress).toEqual({ done: 1000, total: 1000 });
    expect(shown?.logs?.map((l) => l.line)).toEqual([
      ...Array.from({ length: 49 }, (_, i) => `line ${i + 12}`),
      `${'y'.repeat(1000)}… [truncated]`,
    ]);
    expect(shown?.logs?.every((l) => l.at instanceof Date && !Number.isNaN(l.at.getTime()))).toBe(true);
    // 1,061 reports in one turn: the first write, then one more with everything after it.
    expect(events.length).toBeLessThanOrEqual(3);
    expect(events.at(-1)).toMatchObject({ progress: { done: 1000, total: 1000 } });
    hold.open();
  });

  it('writes progress and log lines reported without await just before the handler returns or throws', async () => {
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'keep',
      handlers: {
        sync: (_job, { progress, log }) => {
          void progress('sync done');
          void log('sync line');
          return 1;
        },
        async: async (_job, { progress, log }) => {
          void progress(1);
          await new Promise((resolve) => setTimeout(resolve, 10));
          void progress(2);
          void log('async line');
          return 2;
        },
        throws: (_job, { log }) => {
          void log('about to fail');
          throw new PermanentError('no');
        },
      },
    });
    await worker.start();
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'sync', payload: {} },
      { kind: 'async', payload: {} },
      { kind: 'throws', payload: {} },
    ]);
    await waitFor(
      async () => (await t.jobCount("status IN ('succeeded', 'failed')")) === 3,
      30_000,
      'the three jobs',
    );
    const shown = await Promise.all(jobs.map((j) => t.skiplock.getJob(j.id)));
    expect(shown.map((j) => [j?.status, j?.progress, j?.logs?.map((l) => l.line)])).toEqual([
      ['succeeded', 'sync done', ['sync line']],
      ['succeeded', 2, ['async line']],
      ['failed', null, ['about to fail']],
    ]);
  });

  it('a line logged while another transaction holds the row resolves false and is written after it ends', async () => {
    const locked = gate();
    const unlocked = gate();
    const outcomes: boolean[] = [];
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'keep',
      handlers: {
        p: async (_job, { log }) => {
          outcomes.push(await log('before'));
          await locked.opened;
          outcomes.push(await log('while locked'));
          await unlocked.opened;
          outcomes.push(await log('after'));
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('p', {});
    await waitFor(() => outcomes.length === 1, 20_000, 'the first line written');
    const holder = await t.db.pool.connect();
    t.defer(() => holder.release());
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1 FOR UPDATE`, [job.id]);
    locked.open();
    await waitFor(() => outcomes.length === 2, 20_000, 'the locked write');
    await holder.query('COMMIT');
    unlocked.open();
    await waitFor(async () => (await t.jobCount("status = 'succeeded'")) === 1, 20_000, 'the job to succeed');
    expect(outcomes).toEqual([true, false, true]);
    expect((await t.skiplock.getJob(job.id))?.logs?.map((l) => l.line)).toEqual([
      'before',
      'while locked',
      'after',
    ]);
  });

  it('writes nothing once the lease is gone, and resolves false', async () => {
    const running = gate<{
      progress(value: unknown): Promise<boolean>;
      log(line: string): Promise<boolean>;
    }>();
    const hold = gate();
    const worker = t.worker({
      pollIntervalMs: 100,
      heartbeatIntervalMs: 60_000,
      sweepIntervalMs: 600_000,
      handlers: {
        p: async (_job, context) => {
          running.open(context);
          await hold.opened;
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('p', {});
    const context = await running.opened;
    expect(await context.progress(1)).toBe(true);
    await reclaim(t, job.id);
    expect(await context.progress(2)).toBe(false);
    expect(await context.log('late')).toBe(false);
    const shown = await t.skiplock.getJob(job.id);
    expect({ progress: shown?.progress, logs: shown?.logs }).toEqual({ progress: 1, logs: [] });
    hold.open();
  });

  it('rejects a progress value over 4 KiB or not JSON, and a log line that is not a string or not storable, naming the field; the good reports beside them are written', async () => {
    const errors = gate<unknown[]>();
    const worker = t.worker({
      pollIntervalMs: 100,
      onSuccess: 'keep',
      handlers: {
        p: async (_job, { progress, log }) => {
          const outcomes = await Promise.allSettled([
            log('before'),
            progress({ step: 1 }),
            progress('x'.repeat(5000)),
            progress(undefined),
            progress({ n: 1n }),
            log(42 as unknown as string),
            log('bad\u0000line'),
            log('lone \ud800'),
          ]);
          errors.open(outcomes.map((o) => (o.status === 'rejected' ? o.reason : o.value)));
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('p', {});
    const [before, step, ...reasons] = (await errors.opened) as [boolean, boolean, ...ValidationError[]];
    expect([before, step]).toEqual([true, true]);
    expect(reasons.every((r) => r instanceof ValidationError)).toBe(true);
    expect(reasons.map((r) => r.field)).toEqual([
      'progress',
      'progress',
      'progress.n',
      'line',
      'line',
      'line',
    ]);
    const shown = await t.skiplock.getJob(job.id);
    expect([shown?.progress, shown?.logs?.map((l) => l.line)]).toEqual([{ step: 1 }, ['before']]);
  });

  it('drops a refused report the handler did not await, without an unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const worker = t.worker({
        pollIntervalMs: 100,
        onSuccess: 'keep',
        handlers: {
          p: async (_job, { progress, log }) => {
            void progress({ n: 1n });
            void log(42 as unknown as string);
            void progress({ step: 2 });
            return 'done';
          },
        },
      });
      await worker.start();
      const job = await t.skiplock.enqueue('p', {});
      const shown = await waitFor(
        async () => {
          const j = await t.skiplock.getJob(job.id);
          return j?.status === 'succeeded' ? j : undefined;
        },
        10_000,
        'the job to succeed',
      );
      expect([shown.result, shown.progress]).toEqual(['done', { step: 2 }]);
      // Unhandled rejections are reported after a turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
