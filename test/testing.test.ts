/**
 * skiplock/testing: drain runs due jobs of the given kinds in-process, to
 * completion, with the worker's rules; enqueued lists what waits.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import {
  PermanentError,
  SkiplockError,
  SnoozeError,
  type TransactionalHandlerContext,
  ValidationError,
} from '../src/index.js';
import { drain, enqueued } from '../src/testing/index.js';
import { useFileDatabase } from './support/file-database.js';

type Jobs = {
  send_email: { to: string };
  charge: { cents: number };
  flaky: Record<string, never>;
  fatal: Record<string, never>;
  fan_out: { n: number };
};

const { db, skiplock } = useFileDatabase<Jobs>();

beforeEach(async () => {
  await db.query(`DELETE FROM ${db.jobs}`);
});

describe('enqueued()', () => {
  it('lists queued jobs, oldest first, by kind and queue', async () => {
    const a = await skiplock.enqueue('send_email', { to: 'a@example.com' });
    const b = await skiplock.enqueue('send_email', { to: 'b@example.com' }, { queue: 'mail' });
    await skiplock.enqueue('charge', { cents: 100 });
    expect((await enqueued(skiplock, { kind: 'send_email' })).map((j) => [j.id, j.payload])).toEqual([
      [a.id, { to: 'a@example.com' }],
      [b.id, { to: 'b@example.com' }],
    ]);
    expect((await enqueued(skiplock, { queue: 'mail' })).map((j) => j.id)).toEqual([b.id]);
    expect(await enqueued(skiplock)).toHaveLength(3);
  });
});

describe('drain()', () => {
  it('runs every due job of the handlers’ kinds, and those the handlers enqueue, then returns', async () => {
    const sent: string[] = [];
    await skiplock.enqueue('send_email', { to: 'a@example.com' });
    await skiplock.enqueue('fan_out', { n: 2 }, { queue: 'other' });
    await skiplock.enqueue('charge', { cents: 5 });
    await skiplock.enqueue('send_email', { to: 'later@example.com' }, { delayMs: 3_600_000 });
    const result = await drain(skiplock, {
      send_email: async (job) => {
        sent.push(job.payload.to);
      },
      fan_out: async (job) => {
        for (let i = 0; i < job.payload.n; i++)
          await skiplock.enqueue('send_email', { to: `fan${i}@example.com` });
      },
    });
    expect(sent.sort()).toEqual(['a@example.com', 'fan0@example.com', 'fan1@example.com']);
    expect({ succeeded: result.succeeded, failed: result.failed }).toEqual({ succeeded: 4, failed: 0 });
    expect(result.jobs.map((j) => [j.job.kind, j.status, j.job.attempts])).toEqual([
      ['send_email', 'succeeded', 1],
      ['fan_out', 'succeeded', 1],
      ['send_email', 'succeeded', 1],
      ['send_email', 'succeeded', 1],
    ]);
    // Not its kinds, and not due: still waiting.
    expect((await enqueued(skiplock)).map((j) => j.kind).sort()).toEqual(['charge', 'send_email']);
  });

  it('runs a snoozing handler as a worker does: attempt not charged, no history, due after the snooze delay', async () => {
    const { id } = await skiplock.enqueue('flaky', {});
    const result = await drain(skiplock, {
      flaky: () => {
        throw new SnoozeError(600_000);
      },
    });
    expect({ succeeded: result.succeeded, failed: result.failed, snoozed: result.snoozed }).toEqual({
      succeeded: 0,
      failed: 0,
      snoozed: 1,
    });
    expect(result.jobs.map((j) => [j.job.kind, j.status, j.job.attempts])).toEqual([['flaky', 'snoozed', 1]]);
    const [row] = await db.query<{
      status: string;
      attempts: number;
      errors: unknown;
      last_error: string | null;
      due_in_s: number;
    }>(
      `SELECT status, attempts, errors, last_error, EXTRACT(EPOCH FROM run_at - now())::float8 AS due_in_s
       FROM ${db.jobs} WHERE id = $1`,
      [id],
    );
    expect(row).toMatchObject({ status: 'queued', attempts: 0, errors: null, last_error: null });
    // Ten minutes from now (the snooze), not the default backoff's second or two.
    expect(row!.due_in_s).toBeGreaterThan(590);
    expect(row!.due_in_s).toBeLessThanOrEqual(600);
  });

  it('records failures as a worker does: retry with backoff, permanent failure', async () => {
    await skiplock.enqueue('flaky', {});
    await skiplock.enqueue('fatal', {});
    const result = await drain(skiplock, {
      flaky: () => {
        throw new Error('try again');
      },
      fatal: () => {
        throw new PermanentError('never');
      },
    });
    expect({ succeeded: result.succeeded, failed: result.failed }).toEqual({ succeeded: 0, failed: 2 });
    expect(result.jobs.map((j) => [j.job.kind, j.status, j.error])).toEqual([
      ['flaky', 'queued', expect.stringContaining('try again')],
      ['fatal', 'failed', expect.stringContaining('never')],
    ]);
    expect(
      await db.query(`SELECT kind, status, attempts, run_at > now() AS later FROM ${db.jobs} ORDER BY id`),
    ).toEqual([
      { kind: 'flaky', status: 'queued', attempts: 1, later: true },
      { kind: 'fatal', status: 'failed', attempts: 1, later: false },
    ]);
  });

  it('runs only the given kinds and queue', async () => {
    await skiplock.enqueue('send_email', { to: 'default@example.com' });
    await skiplock.enqueue('send_email', { to: 'mail@example.com' }, { queue: 'mail' });
    await skiplock.enqueue('charge', { cents: 1 }, { queue: 'mail' });
    const seen: string[] = [];
    const result = await drain(
      skiplock,
      { send_email: (job) => void seen.push(job.payload.to), charge: () => {} },
      { kinds: ['send_email'], queue: 'mail' },
    );
    expect(seen).toEqual(['mail@example.com']);
    expect(result.succeeded).toBe(1);
    expect((await enqueued(skiplock)).map((j) => [j.kind, j.queue])).toEqual([
      ['send_email', 'default'],
      ['charge', 'mail'],
    ]);
  });

  it('refuses bad options naming the field, claiming nothing', async () => {
    const { id } = await skiplock.enqueue('charge', { cents: 5 });
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ onSuccess: 'x' }, 'options.onSuccess', /'delete', 'keep' or 'archive'/],
      [{ kinds: 'charge' }, 'options.kinds', /array of kinds/],
      [{ kinds: ['charge', ''] }, 'options.kinds[1]', /must not be empty/],
      [{ kinds: ['charge', 'refund'] }, 'options.kinds[1]', /has no handler/],
      [{ maxJobs: 0 }, 'options.maxJobs', /≥ 1/],
      [{ maxJobs: 1.5 }, 'options.maxJobs', /integer/],
      [{ queue: 5 }, 'options.queue', /queue name/],
      [{ queue: [] }, 'options.queue', /non-empty array/],
      [{ queue: ['a', 7] }, 'options.queue[1]', /must be a string/],
      [{ onSucess: 'keep' }, 'options.onSucess', /unknown option/],
    ];
    for (const [options, field, message] of cases) {
      const error = await drain(skiplock, { charge: () => {} }, options as never).catch((e: unknown) => e);
      expect(error, field).toBeInstanceOf(ValidationError);
      expect(error, field).toMatchObject({ field });
      expect((error as Error).message, field).toMatch(message);
    }
    await expect(drain(skiplock, null as never)).rejects.toMatchObject({ field: 'handlers' });
    expect(await db.query(`SELECT status, attempts FROM ${db.jobs} WHERE id = $1`, [id])).toEqual([
      { status: 'queued', attempts: 0 },
    ]);
  });

  it('stops with DRAIN_LIMIT when handlers keep enqueueing due jobs, giving back what it holds', async () => {
    await skiplock.enqueue('fan_out', { n: 1 });
    const error = await drain(
      skiplock,
      { fan_out: async () => void (await skiplock.enqueue('fan_out', { n: 1 })) },
      { maxJobs: 5 },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SkiplockError);
    expect((error as SkiplockError).code).toBe('DRAIN_LIMIT');
    expect(await db.query(`SELECT status, attempts FROM ${db.jobs}`)).toEqual([
      { status: 'queued', attempts: 0 },
    ]);
  });

  it('keeps succeeded jobs with onSuccess: keep', async () => {
    const job = await skiplock.enqueue('charge', { cents: 7 });
    await drain(skiplock, { charge: () => {} }, { onSuccess: 'keep' });
    expect(await skiplock.getJob(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('progress() and log() write nothing under drain: they resolve false', async () => {
    const job = await skiplock.enqueue('charge', { cents: 9 });
    const answers: boolean[] = [];
    await drain(
      skiplock,
      {
        charge: async (_job, { progress, log }) => {
          answers.push(await progress({ pct: 50 }), await log('half way'));
        },
      },
      { onSuccess: 'keep' },
    );
    expect(answers).toEqual([false, false]);
    expect(await skiplock.getJob(job.id)).toMatchObject({ status: 'succeeded', progress: null, logs: [] });
  });

  it('stores a transactional handler’s result and honours its job’s own success policy, as a worker does', async () => {
    const kept = await skiplock.enqueue('charge', { cents: 7 });
    const archived = await skiplock.enqueue('charge', { cents: 8 }, { onSuccess: 'archive' });
    await drain(
      skiplock,
      {
        charge: {
          transactional: true,
          handle: async (job) => ({ charged: job.payload.cents }),
        },
      },
      { onSuccess: 'keep' },
    );
    expect(await skiplock.getJob(kept.id)).toMatchObject({ status: 'succeeded', result: { charged: 7 } });
    expect(await skiplock.getJob(archived.id)).toBeUndefined();
    expect(await skiplock.waitFor(archived.id)).toEqual({
      status: 'succeeded',
      result: { charged: 8 },
      lastError: null,
    });
  });
});

describe('drain({ client })', () => {
  /** The jobs table as a test compares it: every column a drain may change. */
  const table = () =>
    db.query(
      `SELECT id, kind, status, attempts, run_at, locked_by, lease_seq, last_error, errors, finished_at
       FROM ${db.jobs} ORDER BY id`,
    );

  it('runs inside the caller’s transaction: rolled back, the jobs are as they were', async () => {
    await skiplock.enqueue('send_email', { to: 'a@example.com' });
    await skiplock.enqueue('flaky', {});
    await skiplock.enqueue('fatal', {});
    const before = await table();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // Enqueued in the same transaction: drained too, and gone with the rollback.
      await skiplock.enqueue('charge', { cents: 1 }, { client });
      const result = await drain(
        skiplock,
        {
          send_email: () => {},
          charge: () => {},
          flaky: () => {
            throw new Error('try again');
          },
          fatal: () => {
            throw new PermanentError('no');
          },
        },
        { client },
      );
      expect(result.jobs.map((j) => [j.job.kind, j.status])).toEqual([
        ['send_email', 'succeeded'],
        ['flaky', 'queued'],
        ['fatal', 'failed'],
        ['charge', 'succeeded'],
      ]);
      // Inside the transaction the results are there; outside, nothing has changed yet.
      expect((await client.query(`SELECT kind, status FROM ${db.jobs} ORDER BY id`)).rows).toEqual([
        { kind: 'flaky', status: 'queued' },
        { kind: 'fatal', status: 'failed' },
      ]);
      expect(await table()).toEqual(before);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await table()).toEqual(before);
  });

  it('commits with the caller’s transaction; a transactional handler runs in a savepoint of it', async () => {
    await db.query(`CREATE TABLE IF NOT EXISTS drain_charges (cents int)`);
    await db.query(`DELETE FROM drain_charges`);
    const ok = await skiplock.enqueue('charge', { cents: 5 });
    const bad = await skiplock.enqueue('charge', { cents: -1 });
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await drain(
        skiplock,
        {
          charge: {
            transactional: true,
            handle: async (job, { client: tx }: TransactionalHandlerContext) => {
              await tx.query('INSERT INTO drain_charges VALUES ($1)', [job.payload.cents]);
              if (job.payload.cents < 0) throw new PermanentError('negative');
            },
          },
        },
        { client, onSuccess: 'keep' },
      );
      expect(result.jobs.map((j) => [j.job.id, j.status])).toEqual([
        [ok.id, 'succeeded'],
        [bad.id, 'failed'],
      ]);
      // Nothing is visible outside before COMMIT.
      expect(await db.query(`SELECT count(*)::int AS n FROM drain_charges`)).toEqual([{ n: 0 }]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    // The failed attempt's write was rolled back to its savepoint; the successful one committed with its job.
    expect(await db.query(`SELECT cents FROM drain_charges`)).toEqual([{ cents: 5 }]);
    expect(await db.query(`SELECT id, status FROM ${db.jobs} ORDER BY id`)).toEqual([
      { id: ok.id, status: 'succeeded' },
      { id: bad.id, status: 'failed' },
    ]);
    await db.query(`DROP TABLE drain_charges`);
  });

  it('refuses a client without query(), changing nothing', async () => {
    await skiplock.enqueue('charge', { cents: 5 });
    const before = await table();
    await expect(drain(skiplock, { charge: () => {} }, { client: {} as never })).rejects.toMatchObject({
      code: 'VALIDATION',
      field: 'options.client',
    });
    expect(await table()).toEqual(before);
  });

  it('ends a job whose cancel was requested while it ran as cancelled, whatever the handler returned', async () => {
    const job = await skiplock.enqueue('charge', { cents: 5 });
    const result = await drain(skiplock, {
      charge: async () => {
        await skiplock.cancel({ ids: [job.id] });
      },
    });
    expect(result).toMatchObject({ succeeded: 0, cancelled: 1 });
    expect(result.jobs.map((j) => j.status)).toEqual(['cancelled']);
    expect(await skiplock.getJob(job.id)).toMatchObject({ status: 'cancelled', attempts: 1 });
  });
});
