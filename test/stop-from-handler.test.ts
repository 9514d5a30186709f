/**
 * `worker.stop()` called by one of the worker's own handlers: stop does not
 * wait for that handler before it gives the others back, waits for its result
 * until the deadline, and leaves nothing running; awaited or not, alone or
 * beside an outside stop.
 */
import { describe, expect, it } from 'vitest';
import { type Handlers, type JobMap, ShutdownError, type Worker } from '../src/index.js';
import { waitFor } from './support/database.js';
import { eventOf, nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { holdClaims } from './support/held-claims.js';

const t = useTestDatabase();

/** Longer than the test's own timeout: a stop that waited it out fails the test. */
const NEVER_MS = 120_000;

/** A job's row once its one attempt succeeded and the worker let go of it. */
const SUCCEEDED_ONCE = { status: 'succeeded', attempts: 1, locked_by: null, last_error: null };

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000, onSuccess: 'keep' } as const;

/** A worker on `queue` whose stop waits out no deadline within the test, unless `options` gives one. */
function patientWorker(
  queue: string,
  handlers: Handlers<JobMap>,
  options: { concurrency?: number; shutdownTimeoutMs?: number } = {},
): Worker {
  return t.worker({ ...base, queues: [queue], shutdownTimeoutMs: NEVER_MS, ...options, handlers });
}

/** Enqueues a `kind` job of `queue` and resolves with it once `stopping` has stopped. */
async function enqueueUntilStopped(stopping: Worker, kind: string, queue: string) {
  const [job] = await eventOf(stopping, 'worker:stop', () => t.skiplock.enqueue(kind, {}, { queue }));
  return job;
}

describe('stop() from a handler', () => {
  it('awaited: the job ends by its own result and the worker stops without waiting out the deadline', async () => {
    const worker: Worker = patientWorker('awaited', {
      quit: async () => {
        await worker.stop();
      },
    });
    await worker.start();
    const job = await enqueueUntilStopped(worker, 'quit', 'awaited');
    expect(await t.row(job.id)).toEqual(SUCCEEDED_ONCE);
    expect([worker.activeCount, worker.bufferedCount]).toEqual([0, 0]);
  });

  it('not awaited: stop waits for the calling job, which ends by its own result', async () => {
    const proceed = gate();
    const othersDone = gate<{ stopping: Promise<void> }>();
    const worker: Worker = patientWorker('unawaited', {
      quitLater: async () => {
        othersDone.open({ stopping: worker.stop() });
        await proceed.opened;
      },
    });
    await worker.start();
    const stopped = nextEvent(worker, 'worker:stop');
    const job = await t.skiplock.enqueue('quitLater', {}, { queue: 'unawaited' });
    // What the handler's stop() returned resolves while the handler still runs: stop is under way.
    await (await othersDone.opened).stopping;
    expect(worker.activeCount).toBe(1);
    proceed.open();
    await stopped;
    expect(await t.row(job.id)).toEqual(SUCCEEDED_ONCE);
    expect(worker.activeCount).toBe(0);
  });

  it('not awaited, by a handler that outlives the deadline: its job is aborted and given back, nothing left running', async () => {
    const aborted = gate<unknown>();
    const worker: Worker = patientWorker(
      'outlives',
      {
        quitAndHang: (_job, { signal }) => {
          void worker.stop();
          return new Promise<void>((resolve) => {
            signal.addEventListener('abort', () => {
              aborted.open(signal.reason);
              resolve();
            });
          });
        },
      },
      { shutdownTimeoutMs: 300 },
    );
    const released = record(worker, 'job:released');
    await worker.start();
    const job = await enqueueUntilStopped(worker, 'quitAndHang', 'outlives');
    expect(await aborted.opened).toBeInstanceOf(ShutdownError);
    expect(released.map(([j]) => j.id)).toEqual([job.id]);
    // Given back without charging the attempt.
    expect(await t.row(job.id)).toEqual({ status: 'queued', attempts: 0, locked_by: null, last_error: null });
    expect(worker.activeCount).toBe(0);
  });

  it('beside an outside stop: both stops resolve once the other handler is done, and every job ends by its result', async () => {
    const otherStarted = gate();
    const otherMayFinish = gate();
    const handlerStopped = gate<{ stopping: Promise<void> }>();
    let otherDone = false;
    const worker: Worker = patientWorker(
      'beside',
      {
        other: async () => {
          otherStarted.open();
          await otherMayFinish.opened;
          otherDone = true;
        },
        quit: async () => {
          const stopping = worker.stop();
          handlerStopped.open({ stopping });
          await stopping;
        },
      },
      { concurrency: 2 },
    );
    await worker.start();
    const other = await t.skiplock.enqueue('other', {}, { queue: 'beside' });
    await otherStarted.opened;
    const quit = await t.skiplock.enqueue('quit', {}, { queue: 'beside' });
    const { stopping: fromHandler } = await handlerStopped.opened;
    const outside = worker.stop();
    const resolved: string[] = [];
    void fromHandler.then(() => resolved.push(`the handler's stop, the other job done: ${otherDone}`));
    expect(worker.activeCount).toBe(2);
    otherMayFinish.open();
    await outside;
    // The handler's stop waited for the other handler (not aborted: the deadline is far), not for its own.
    expect(resolved).toEqual(["the handler's stop, the other job done: true"]);
    expect(await t.row(other.id)).toEqual(SUCCEEDED_ONCE);
    expect(await t.row(quit.id)).toEqual(SUCCEEDED_ONCE);
    expect([worker.activeCount, worker.bufferedCount]).toEqual([0, 0]);
  });

  /**
   * Holds every claim of a job of kind `held` (see {@link holdClaims}). Enqueues, in claim order, `warm` (it
   * gives the worker a run time: it prefetches only then), `first`, `quit`
   * and `held`.
   */
  async function claimHeldInFlight() {
    const held = await holdClaims(t, 4243, true);
    const jobs: Record<string, string> = {};
    for (const kind of ['warm', 'first', 'quit', 'held'])
      jobs[kind] = (await t.skiplock.enqueue(kind, {}, { queue: 'in-flight' })).id;
    return { ...held, jobs };
  }

  /** One slot, one job a claim: `first` runs, `quit` waits in the buffer while the claim of `held` is in flight. */
  const inFlight = { ...base, queues: ['in-flight'], concurrency: 1, batchSize: 1, prefetch: 2 };

  it('not awaited, while a claim is in flight: it resolves only once that claim came back and its job was given back', async () => {
    const held = await claimHeldInFlight();
    const firstMayFinish = gate();
    const handlerStopped = gate<{ stopping: Promise<void> }>();
    const worker: Worker = t.worker({
      ...inFlight,
      shutdownTimeoutMs: NEVER_MS,
      handlers: {
        warm: () => {},
        first: () => firstMayFinish.opened,
        quit: () => handlerStopped.open({ stopping: worker.stop() }),
        held: () => {},
      },
    });
    const events: string[] = [];
    worker.on('job:released', (job) => events.push(`released ${job.kind}`));
    await worker.start();
    try {
      await held.blocked();
      expect([worker.activeCount, worker.bufferedCount]).toEqual([1, 1]);
      const stopped = nextEvent(worker, 'worker:stop', 30_000);
      firstMayFinish.open();
      const { stopping } = await handlerStopped.opened;
      void stopping.then(() => events.push('stop resolved'));
      await held.release();
      await stopping;
      expect(events).toEqual(['released held', 'stop resolved']);
      expect(await t.row(held.jobs.held!)).toEqual({
        status: 'queued',
        attempts: 0,
        locked_by: null,
        last_error: null,
      });
      await stopped;
      expect(await t.row(held.jobs.first!)).toEqual(SUCCEEDED_ONCE);
      expect(await t.row(held.jobs.quit!)).toEqual(SUCCEEDED_ONCE);
    } finally {
      // A failure above leaves neither the handler nor the claim waiting on the worker's stop.
      firstMayFinish.open();
      await held.release();
    }
  });

  it('awaited, while a claim is in flight past shutdownTimeoutMs: the calling job still ends by its own result', async () => {
    const held = await claimHeldInFlight();
    const firstMayFinish = gate();
    const worker: Worker = t.worker({
      ...inFlight,
      shutdownTimeoutMs: 1_000,
      handlers: {
        warm: () => {},
        first: () => firstMayFinish.opened,
        quit: async () => {
          await worker.stop();
        },
        held: () => {},
      },
    });
    let quitSucceeded = false;
    worker.on('job:success', (job) => {
      if (job.kind === 'quit') quitSucceeded = true;
    });
    await worker.start();
    try {
      await held.blocked();
      const stopped = nextEvent(worker, 'worker:stop', 30_000);
      firstMayFinish.open();
      // The claim is still held: waiting for it must not take the calling handler's time.
      await waitFor(() => quitSucceeded, 20_000, 'the calling job to succeed');
      await held.release();
      await stopped;
      expect(await t.row(held.jobs.quit!)).toEqual(SUCCEEDED_ONCE);
      expect(await t.row(held.jobs.held!)).toEqual({
        status: 'queued',
        attempts: 0,
        locked_by: null,
        last_error: null,
      });
    } finally {
      firstMayFinish.open();
      await held.release();
    }
  });

  it('a stop() from a handler of another worker is an ordinary stop of that worker', async () => {
    const stopped: Worker = t.worker({ ...base, queues: ['other-worker'], handlers: { never: () => {} } });
    await stopped.start();
    const worker: Worker = patientWorker('stopper', {
      stopTheOther: async () => {
        await stopped.stop();
      },
    });
    await worker.start();
    const job = await enqueueUntilStopped(stopped, 'stopTheOther', 'stopper');
    await worker.stop();
    expect(await t.row(job.id)).toEqual(SUCCEEDED_ONCE);
  });
});
