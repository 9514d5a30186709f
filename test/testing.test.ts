/**
 * skiplock/testing: drain runs due jobs of the given kinds in-process, to
 * completion, with the worker's rules; enqueued lists what waits.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { PermanentError, SkiplockError, SnoozeError } from '../src/index.js';
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
});
