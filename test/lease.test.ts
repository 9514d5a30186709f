/**
 * Leases: a result is written only under the lease it was claimed with, and
 * heartbeats keep a running job's lease alive or find it lost.
 */
import { describe, expect, it } from 'vitest';
import type { Job } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent, record, SWEEP } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { reclaim, sweepNow, waitForFreshLeases } from './support/leases.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

describe('lease', () => {
  it('a late result from a reclaimed lease changes nothing', async () => {
    const release = gate();
    const started = gate<Job>();
    const a = t.worker({
      ...base,
      concurrency: 1, // frozen on its one job: it cannot claim the job again itself
      queues: ['stale'],
      onSuccess: 'keep',
      handlers: {
        work: async (job) => {
          started.open(job);
          await release.opened;
        },
      },
    });
    await a.start();
    const job = await t.skiplock.enqueue('work', {}, { queue: 'stale' });
    await started.opened;
    // A froze: its lease ages past the visibility timeout and the sweeper reclaims it.
    expect(await reclaim(t, job.id)).toEqual({
      status: 'queued',
      attempts: 1,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });

    const b = t.worker({
      ...base,
      queues: ['stale'],
      handlers: {
        work: () => {
          throw new Error('second attempt failed');
        },
      },
    });
    const failed = nextEvent(b, 'job:failure');
    await b.start();
    const [, , outcome] = await failed;
    expect(outcome.status).toBe('queued');
    const afterB = await t.row(job.id);
    expect(afterB).toMatchObject({ status: 'queued', attempts: 2, locked_by: null });
    expect(afterB?.last_error).toMatch(/second attempt failed/);

    // A wakes up and reports success for attempt 1: fenced out.
    const stale = nextEvent(a, 'job:stale');
    release.open();
    const [staleJob] = await stale;
    expect(staleJob.id).toBe(job.id);
    expect(await t.row(job.id)).toEqual(afterB);
  });

  it('a stale lease from before a requeue cannot write over the same worker’s new lease of the same attempt', async () => {
    const gates = [gate(), gate()];
    const started: number[] = [];
    const worker = t.worker({
      ...base,
      queues: ['requeued'],
      concurrency: 2,
      onSuccess: 'keep',
      handlers: {
        once: async () => {
          const run = started.length;
          started.push(run);
          await gates[run]!.opened;
          if (run === 0) throw new Error('late failure of the first lease');
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('once', {}, { queue: 'requeued', maxAttempts: 1 });
    await waitFor(() => started.length === 1, 5000, 'the first run');
    expect(await reclaim(t, job.id)).toMatchObject({ status: 'dead', attempts: 1, locked_by: null });
    expect(await t.skiplock.requeue({ ids: [job.id] })).toBe(1);
    // The same worker claims it again: attempt 1 again, by the same worker id.
    await waitFor(() => started.length === 2, 5000, 'the run after requeue');
    expect(await t.row(job.id)).toMatchObject({ status: 'running', attempts: 1, locked_by: worker.id });
    const stale = nextEvent(worker, 'job:stale');
    gates[0]!.open();
    await stale;
    expect(await t.row(job.id)).toMatchObject({ status: 'running', attempts: 1, last_error: null });
    const succeeded = nextEvent(worker, 'job:success');
    gates[1]!.open();
    await succeeded;
    expect(await t.row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('heartbeats keep a long job leased past the visibility timeout', async () => {
    // 20 heartbeats per visibility timeout: a loaded machine delays some, not twenty in a row.
    const visibilityTimeoutMs = 2000;
    const release = gate();
    const started = gate<number>();
    const worker = t.worker({
      ...base,
      queues: ['long'],
      visibilityTimeoutMs,
      heartbeatIntervalMs: 100,
      sweepIntervalMs: 100,
      onSuccess: 'keep',
      handlers: {
        long: async () => {
          started.open(Date.now());
          await release.opened;
        },
      },
    });
    const sweeps = record(worker, SWEEP);
    await worker.start();
    const job = await t.skiplock.enqueue('long', {}, { queue: 'long' });
    const startedAt = await started.opened;
    // Running for longer than the visibility timeout, yet its lease was just refreshed.
    const [fresh] = await waitForFreshLeases(
      t,
      [job.id],
      startedAt,
      visibilityTimeoutMs,
      'the job to outlive its visibility timeout with a fresh lease',
    );
    expect(fresh).toMatchObject({ status: 'running', attempts: 1 });
    expect(await sweepNow(t.skiplock)).toEqual({ locked: true, requeued: 0, dead: 0, expired: 0 });
    const succeeded = nextEvent(worker, 'job:success');
    release.open();
    await succeeded;
    expect(await t.row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(sweeps).toEqual([]);
  });

  it('a row another transaction holds locked past the visibility timeout holds up no other lease and is not reclaimed', async () => {
    const release = gate();
    const worker = t.worker({
      ...base,
      concurrency: 2,
      heartbeatIntervalMs: 100,
      visibilityTimeoutMs: 1500,
      sweepIntervalMs: 200,
      onSuccess: 'keep',
      handlers: { long: () => release.opened },
    });
    const lost = record(worker, 'job:stale');
    await worker.start();
    const [locked, other] = await t.skiplock.enqueueMany([
      { kind: 'long', payload: {} },
      { kind: 'long', payload: {} },
    ]);
    await waitFor(async () => (await t.jobCount("status = 'running'")) === 2, 20_000, 'both jobs running');
    // As a child's enqueue naming it as parent does, until its transaction commits.
    const holder = await t.db.pool.connect();
    t.defer(() => holder.release());
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1 FOR UPDATE`, [locked!.id]);
    const lockedAt = async (id: string) =>
      (
        await t.query<{ at: Date }>(`SELECT locked_at AS at FROM ${t.jobs} WHERE id = $1`, [id])
      )[0]!.at.getTime();
    const before = await lockedAt(other!.id);
    await waitFor(async () => (await lockedAt(other!.id)) > before, 20_000, 'the other lease renewed');
    // Held past the visibility timeout: the locked lease is stale until the lock goes, then renewed at once.
    const ageMs = async (id: string) =>
      (
        await t.query<{ ms: number }>(
          `SELECT (extract(epoch FROM now() - locked_at) * 1000)::int AS ms FROM ${t.jobs} WHERE id = $1`,
          [id],
        )
      )[0]!.ms;
    await waitFor(async () => (await ageMs(locked!.id)) > 2000, 20_000, 'the locked lease to go stale');
    const unlockedBefore = await lockedAt(locked!.id);
    const committing = (await holder.query<{ at: Date }>('SELECT clock_timestamp() AS at')).rows[0]!.at;
    await holder.query('COMMIT');
    await waitFor(
      async () => (await lockedAt(locked!.id)) > unlockedBefore,
      20_000,
      'the locked lease renewed',
    );
    // Stamped when written, not when its wait for the lock began (already stale by then).
    expect(await lockedAt(locked!.id)).toBeGreaterThanOrEqual(committing.getTime());
    const succeeded = nextEvent(worker, 'job:success');
    release.open();
    await succeeded;
    await waitFor(
      async () => (await t.jobCount("status = 'succeeded'")) === 2,
      20_000,
      'both jobs succeeded',
    );
    expect(await t.jobCount('attempts = 1')).toBe(2);
    expect(lost).toEqual([]);
  });

  it('a heartbeat that finds its lease reclaimed aborts the handler', async () => {
    const started = gate<AbortSignal>();
    const worker = t.worker({
      ...base,
      concurrency: 1,
      shutdownTimeoutMs: 100,
      queues: ['lost'],
      visibilityTimeoutMs: 60_000,
      heartbeatIntervalMs: 50,
      handlers: {
        lost: (job, { signal }) => {
          if (job.attempts === 1) started.open(signal);
          return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        },
      },
    });
    const lost = nextEvent(worker, 'lease:lost');
    const stale = nextEvent(worker, 'job:stale');
    await worker.start();
    const job = await t.skiplock.enqueue('lost', {}, { queue: 'lost' });
    const signal = await started.opened;
    // Once the heartbeat has aborted the handler, the worker may claim the job again (attempt 2).
    await reclaim(t, job.id);
    const [lostJob] = await lost;
    expect(lostJob.id).toBe(job.id);
    expect(signal.aborted).toBe(true);
    expect((signal.reason as Error).name).toBe('LeaseLostError');
    const [staleJob] = await stale;
    expect(staleJob.id).toBe(job.id);
    // Stopping gives back any new attempt uncharged, so the row is the sweeper's.
    await worker.stop();
    expect(await t.row(job.id)).toEqual({
      status: 'queued',
      attempts: 1,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });
  });
});
