import { describe, expect, it } from 'vitest';
import { snoozeDelayMs } from '../src/errors.js';
import { SnoozeError, ValidationError } from '../src/index.js';
import { PAUSE_RECHECK_MS } from '../src/worker/cancellation.js';
import { waitFor } from './support/database.js';
import { nextEvent, record } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { blockOnceBuffered } from './support/gate.js';
import { NO_LIMITS } from './support/queue-limits.js';

const { db, skiplock } = useFileDatabase();

const fast = { handleSignals: false, pollIntervalMs: 200 } as const;

async function statuses(queue: string): Promise<Record<string, number>> {
  const rows = await db.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${db.jobs} WHERE queue = $1 GROUP BY status`,
    [queue],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/**
 * A worker of `queue` (one slot, prefetch 10) and 40 jobs of it: resolves once
 * one job holds the slot (until `slot.release()`) and others wait in the buffer.
 */
async function blockedWithBuffer(queue: string, options: { listen?: boolean } = {}) {
  const slot = blockOnceBuffered(() => worker);
  const worker = skiplock.worker({
    ...fast,
    ...options,
    queues: [queue],
    concurrency: 1,
    prefetch: 10,
    onSuccess: 'keep',
    handlers: { step: slot.handler },
  });
  await skiplock.enqueueMany(Array.from({ length: 40 }, () => ({ kind: 'step', payload: {}, queue })));
  await worker.start();
  await waitFor(() => slot.blocked && worker.bufferedCount > 0, 5000, 'a blocked handler and a buffer');
  return { worker, slot };
}

describe('pause and resume', () => {
  it("a paused queue's jobs are not claimed while another queue's are; resume runs them at once", async () => {
    expect(await skiplock.pauseQueue('p-paused')).toBe(true);
    expect(await skiplock.pauseQueue('p-paused')).toBe(false);
    const ran: string[] = [];
    const worker = skiplock.worker({
      ...fast,
      // A slow poll: resume must wake the worker, not the poll.
      pollIntervalMs: 60_000,
      queues: ['p-paused', 'p-open'],
      onSuccess: 'keep',
      handlers: { work: async (job) => void ran.push(job.queue) },
    });
    await worker.start();
    await skiplock.enqueueMany([
      ...Array.from({ length: 5 }, () => ({ kind: 'work', payload: {}, queue: 'p-paused' })),
      ...Array.from({ length: 5 }, () => ({ kind: 'work', payload: {}, queue: 'p-open' })),
    ]);
    await waitFor(async () => (await statuses('p-open')).succeeded === 5, 5000, 'p-open to run');
    expect(await statuses('p-paused')).toEqual({ queued: 5 });
    const listed = await skiplock.queues();
    expect(listed.find((q) => q.name === 'p-paused')).toMatchObject({ paused: true, queued: 5, running: 0 });
    expect(listed.find((q) => q.name === 'p-paused')?.pausedAt).toBeInstanceOf(Date);
    expect(listed.find((q) => q.name === 'p-open')).toEqual({
      name: 'p-open',
      paused: false,
      pausedAt: null,
      queued: 0,
      running: 0,
      limits: NO_LIMITS,
    });

    const t0 = performance.now();
    expect(await skiplock.resumeQueue('p-paused')).toBe(true);
    await waitFor(async () => (await statuses('p-paused')).succeeded === 5, 5000, 'p-paused to run');
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(ran.filter((q) => q === 'p-paused')).toHaveLength(5);
    expect(await skiplock.resumeQueue('p-paused')).toBe(false);
    await worker.stop();
  });

  it('pause stops claims within a second; running jobs finish; buffered ones are given back; it outlives a restart', async () => {
    const { worker, slot } = await blockedWithBuffer('p-live');
    const t0 = performance.now();
    await skiplock.pauseQueue('p-live');
    // The buffer is given back (its release statement committed): only the
    // blocked handler's job is still running.
    await waitFor(
      async () => worker.bufferedCount === 0 && (await statuses('p-live')).running === 1,
      2000,
      `the buffer to be given back (${worker.bufferedCount} buffered)`,
    );
    expect(performance.now() - t0).toBeLessThan(1500);
    slot.release();
    await waitFor(
      async () => (await statuses('p-live')).running === undefined,
      5000,
      'the running job to finish',
    );
    const paused = await statuses('p-live');
    expect(paused.queued).toBeGreaterThan(0);
    await worker.stop();

    // A new worker (a restart) claims nothing from the paused queue: it claims
    // a job of another queue (one claim statement serves both), yet the paused
    // queue's jobs stay where they were.
    const again = skiplock.worker({
      ...fast,
      queues: ['p-live', 'p-live-other'],
      handlers: { step: async () => {} },
    });
    await again.start();
    const other = nextEvent(again, 'job:success');
    await skiplock.enqueue('step', {}, { queue: 'p-live-other', priority: -1 });
    await other;
    expect(await statuses('p-live')).toEqual(paused);
    await again.stop();
  });

  it('without LISTEN, a buffered job of a paused queue does not start once the pause is a second old; it is given back uncharged', async () => {
    const { worker, slot } = await blockedWithBuffer('p-no-listen', { listen: false });
    const buffered = worker.bufferedCount;
    const starts: number[] = [];
    worker.on('job:start', () => starts.push(performance.now()));
    const released = record(worker, 'job:released');
    await skiplock.pauseQueue('p-no-listen');
    // The bound is about time: let the pause grow older than it, then free the slot.
    await new Promise((resolve) => setTimeout(resolve, PAUSE_RECHECK_MS + 200));
    slot.release();
    await waitFor(
      () => released.length === buffered,
      5000,
      `the ${buffered} buffered jobs to be given back`,
      () => ({
        released: released.length,
        starts: starts.length,
      }),
    );
    expect(starts).toEqual([]);
    expect(worker.bufferedCount).toBe(0);
    await waitFor(
      async () => (await statuses('p-no-listen')).running === undefined,
      5000,
      'the blocked job to finish',
    );
    const after = await statuses('p-no-listen');
    expect(after.queued).toBeGreaterThanOrEqual(buffered);
    expect(after.succeeded! + after.queued!).toBe(40);
    // Given back without charging the attempt.
    const [charged] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'p-no-listen' AND status = 'queued' AND attempts <> 0`,
    );
    expect(charged!.n).toBe(0);
    expect(starts).toEqual([]);
    await worker.stop();
  });

  it('refuses an empty queue name', async () => {
    await expect(skiplock.pauseQueue('')).rejects.toBeInstanceOf(ValidationError);
    await expect(skiplock.resumeQueue('a\u0000b')).rejects.toThrow(/name/);
  });
});

describe('snooze', () => {
  it('puts the job back to queued at now() + delay without charging the attempt', async () => {
    const runs: number[] = [];
    const worker = skiplock.worker({
      ...fast,
      queues: ['s-snooze'],
      handlers: {
        later: (job) => {
          runs.push(job.attempts);
          if (runs.length <= 3) throw new SnoozeError(runs.length < 3 ? 1 : 60_000);
        },
      },
    });
    await worker.start();
    const job = await skiplock.enqueue('later', {}, { queue: 's-snooze', maxAttempts: 1 });
    await waitFor(() => runs.length === 3, 10_000, `three runs, saw ${runs.join(',')}`);
    const [row] = await waitFor(
      () =>
        db
          .query<{ status: string; attempts: number; due_in_ms: number; last_error: string | null }>(
            `SELECT status, attempts, (EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS due_in_ms, last_error
           FROM ${db.jobs} WHERE id = $1 AND status = 'queued'`,
            [job.id],
          )
          .then((r) => (r.length === 1 ? r : undefined)),
      5000,
      'the third snooze to be written',
    );
    expect(runs).toEqual([1, 1, 1]);
    expect(row).toMatchObject({ status: 'queued', attempts: 0, last_error: null });
    expect(row!.due_in_ms).toBeGreaterThan(58_000);
    expect(row!.due_in_ms).toBeLessThanOrEqual(60_000);
    // Due now: the 4th run is attempt 1 again and succeeds.
    const succeeded = nextEvent(worker, 'job:success');
    await db.query(`UPDATE ${db.jobs} SET run_at = now() WHERE id = $1`, [job.id]);
    const [done] = await succeeded;
    expect(done.attempts).toBe(1);
    expect(runs).toEqual([1, 1, 1, 1]);
    await worker.stop();
  });

  it('emits job:snoozed with the delay', async () => {
    const worker = skiplock.worker({
      ...fast,
      queues: ['s-event'],
      handlers: {
        later: () => {
          throw new SnoozeError(30_000);
        },
      },
    });
    await worker.start();
    const snoozed = nextEvent(worker, 'job:snoozed');
    const job = await skiplock.enqueue('later', {}, { queue: 's-event' });
    const [seen, info] = await snoozed;
    expect(seen.id).toBe(job.id);
    expect(info).toEqual({ delayMs: 30_000 });
    await worker.stop();
  });

  it('refuses a bad delay', () => {
    expect(() => new SnoozeError(-1)).toThrow(ValidationError);
    expect(() => new SnoozeError(Number.NaN)).toThrow(/delayMs/);
    // Longer than a timestamp holds: refused here, not by the statement that writes the results of other jobs too.
    expect(() => new SnoozeError(1e20)).toThrow(
      'delayMs: must be a finite number of milliseconds from 0 to 10,000 years',
    );
    expect(new SnoozeError(315_360_000_000_000).delayMs).toBe(315_360_000_000_000);
    // …and changed after the constructor: not a snooze (the attempt fails, retried as any error).
    expect(snoozeDelayMs(Object.assign(new SnoozeError(0), { delayMs: 1e17 }))).toBeUndefined();
    expect(snoozeDelayMs(new SnoozeError(5))).toBe(5);
    expect(new SnoozeError(0).code).toBe('SNOOZE');
  });
});
