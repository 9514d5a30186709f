/**
 * Prefetch: a worker claims ahead of its free slots into a buffer while a
 * backlog waits. Buffered jobs hold leases like running ones: stop gives them
 * back at once without charging the attempt, a SIGKILLed worker's buffered jobs
 * come back after the visibility timeout, and two workers on one queue both
 * get work.
 */
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { JobMap, Worker, WorkerOptions } from '../src/index.js';
import { TEST_SCHEMA, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { blockOnceBuffered, gate } from './support/gate.js';
import { exited, startWorkerProcess } from './support/processes.js';

const { db, skiplock } = useFileDatabase();
const workers: Worker[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  await db.query(
    'CREATE TABLE effects (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL, at timestamptz DEFAULT now())',
  );
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

const base = { handleSignals: false, pollIntervalMs: 200 } as const;

function track(worker: Worker): Worker {
  workers.push(worker);
  return worker;
}

/** A worker of `queue` with the file's defaults, stopped after the test. */
function queueWorker(queue: string, options: Omit<WorkerOptions<JobMap>, 'queues'>): Worker {
  return track(skiplock.worker({ ...base, queues: [queue], ...options }));
}

async function jobRows(queue: string) {
  return db.query<{ id: string; status: string; attempts: number; locked_by: string | null }>(
    `SELECT id, status, attempts, locked_by FROM ${db.jobs} WHERE queue = $1 ORDER BY id`,
    [queue],
  );
}

/**
 * A worker of `queue` (not started; one slot, prefetch 10) whose first job
 * that starts while others wait in the buffer holds its slot, and 40 jobs.
 */
async function slotBlockedOnceBuffered(
  queue: string,
  options: { onSuccess?: 'keep'; prefetchTimeoutMs?: number },
) {
  const slot = blockOnceBuffered(() => worker);
  const worker = queueWorker(queue, {
    ...options,
    concurrency: 1,
    prefetch: 10,
    handlers: { fast: slot.handler },
  });
  await skiplock.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ kind: 'fast', payload: { i }, queue })));
  return { worker, slot };
}

describe('prefetch', () => {
  it('stop() gives buffered jobs back at once, without charging their attempt', async () => {
    const queue = 'pf-stop';
    const { worker, slot } = await slotBlockedOnceBuffered(queue, { onSuccess: 'keep' });
    await worker.start();
    await waitFor(() => slot.blockedId, 20_000, 'a job to start while others are buffered');
    const buffered = worker.bufferedCount;
    expect(buffered).toBeGreaterThan(0);
    const released: string[] = [];
    worker.on('job:released', (job) => released.push(job.id));
    const stopping = worker.stop();
    // While the blocked handler still runs, the buffered jobs are already queued, uncharged.
    await waitFor(() => released.length === buffered, 10_000, `${buffered} buffered jobs released`);
    const rows = await jobRows(queue);
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of released)
      expect(byId.get(id)).toMatchObject({ status: 'queued', attempts: 0, locked_by: null });
    expect(byId.get(slot.blockedId!)).toMatchObject({ status: 'running', attempts: 1 });
    slot.release();
    await stopping;
    // The blocked job ended by its own result; nothing is left running.
    expect((await jobRows(queue)).find((r) => r.id === slot.blockedId)).toMatchObject({
      status: 'succeeded',
    });
    expect((await jobRows(queue)).filter((r) => r.status === 'running')).toEqual([]);
  });

  it('a SIGKILLed worker’s buffered jobs come back after the visibility timeout and run once more', async () => {
    const queue = 'pf-kill';
    const workerId = 'pf-kill-victim';
    const ids = (
      await skiplock.enqueueMany(
        Array.from({ length: 200 }, (_, i) => ({ kind: 'effect', payload: { i }, queue })),
      )
    ).map((j) => j.id);
    const victim = await startWorkerProcess({
      SKIPLOCK_URL: db.url,
      SKIPLOCK_SCHEMA: TEST_SCHEMA,
      HANDLER_DELAY_MS: '100',
      WORKER_OPTIONS: JSON.stringify({
        queues: [queue],
        concurrency: 4,
        prefetch: 20,
        workerId,
        visibilityTimeoutMs: 1500,
        heartbeatIntervalMs: 300,
        onSuccess: 'keep',
      }),
    });
    children.push(victim);
    // Held beyond its 4 slots: some jobs wait in its buffer.
    const held = async () =>
      (await jobRows(queue)).filter((r) => r.status === 'running' && r.locked_by === workerId).length;
    await waitFor(async () => (await held()) > 4, 30_000, 'the victim to hold buffered jobs');
    victim.kill('SIGKILL');
    expect(await exited(victim)).toBe('SIGKILL');
    const stranded = (await jobRows(queue)).filter((r) => r.status === 'running' && r.locked_by === workerId);
    const ranInVictim = new Set(
      (
        await db.query<{ job_id: string }>('SELECT job_id::text FROM effects WHERE pid = $1', [victim.pid])
      ).map((r) => r.job_id),
    );
    const neverStarted = stranded.filter((r) => !ranInVictim.has(r.id));
    expect(neverStarted.length).toBeGreaterThan(0);

    const survivor = queueWorker(queue, {
      concurrency: 20,
      sweepIntervalMs: 200,
      visibilityTimeoutMs: 1500,
      onSuccess: 'keep',
      handlers: {
        effect: async (job) => {
          await db.query('INSERT INTO effects (job_id, attempts, pid) VALUES ($1, $2, $3)', [
            job.id,
            job.attempts,
            -1,
          ]);
        },
      },
    });
    await survivor.start();
    await waitFor(
      async () => (await jobRows(queue)).every((r) => r.status === 'succeeded'),
      30_000,
      'every job to succeed',
    );
    // Nothing lost; every buffered job that never started in the victim ran once, on its second claim.
    const effects = await db.query<{ job_id: string; attempts: number; pid: number }>(
      'SELECT job_id::text, attempts, pid FROM effects WHERE job_id = ANY($1::bigint[]) ORDER BY job_id, at',
      [ids],
    );
    expect(new Set(effects.map((e) => e.job_id))).toEqual(new Set(ids));
    for (const job of neverStarted) {
      expect(effects.filter((e) => e.job_id === job.id)).toEqual([{ job_id: job.id, attempts: 2, pid: -1 }]);
    }
  });

  it('without prefetch, a claim takes every slot freed in the same turn of the event loop', async () => {
    const queue = 'pf-none';
    const jobs = 200;
    await skiplock.enqueueMany(
      Array.from({ length: jobs }, (_, i) => ({ kind: 'tick', payload: { i }, queue })),
    );
    const sizes: number[] = [];
    const worker = queueWorker(queue, {
      concurrency: 10,
      prefetch: 0,
      // Each handler settles in a setImmediate callback of its own, all in one turn.
      handlers: { tick: () => new Promise<void>((resolve) => setImmediate(resolve)) },
    });
    worker.on('worker:claim', (n) => sizes.push(n));
    await worker.start();
    await waitFor(async () => (await jobRows(queue)).length === 0, 30_000, 'the queue to drain');
    expect(sizes).toEqual(Array.from({ length: jobs / 10 }, () => 10));
  });

  it('two workers on one queue with prefetch both get work', async () => {
    const queue = 'pf-share';
    const ranBy = new Map<string, number>();
    const make = (name: string) =>
      queueWorker(queue, {
        concurrency: 2,
        prefetch: 50,
        handlers: {
          quick: async () => {
            ranBy.set(name, (ranBy.get(name) ?? 0) + 1);
            await new Promise((resolve) => setTimeout(resolve, 2));
          },
        },
      });
    const a = make('a');
    const b = make('b');
    await Promise.all([a.start(), b.start()]);
    const jobs = 400;
    let done = 0;
    const all = new Promise<void>((resolve) => {
      for (const w of [a, b])
        w.on('job:success', () => {
          if (++done === jobs) resolve();
        });
    });
    await skiplock.enqueueMany(
      Array.from({ length: jobs }, (_, i) => ({ kind: 'quick', payload: { i }, queue })),
    );
    await all;
    expect((ranBy.get('a') ?? 0) + (ranBy.get('b') ?? 0)).toBe(jobs);
    expect(ranBy.get('a')).toBeGreaterThan(0);
    expect(ranBy.get('b')).toBeGreaterThan(0);
  });

  it('slow jobs buffered behind fast ones are given back for other workers once the handlers slow down', async () => {
    const queue = 'pf-slow-after-fast';
    const slowBy = new Map<string, number>();
    const firstSlow = gate();
    const make = (name: string) =>
      queueWorker(queue, {
        concurrency: 2,
        handlers: {
          fast: async () => {},
          slow: async () => {
            firstSlow.open();
            slowBy.set(name, (slowBy.get(name) ?? 0) + 1);
            await new Promise((resolve) => setTimeout(resolve, 200));
          },
        },
      });
    const a = make('a');
    // Fast jobs first, so that worker a buffers (nearly) everything, then the slow ones behind them.
    await skiplock.enqueueMany([
      ...Array.from({ length: 300 }, (_, i) => ({ kind: 'fast', payload: { i }, queue, priority: 1 })),
      ...Array.from({ length: 60 }, (_, i) => ({ kind: 'slow', payload: { i }, queue })),
    ]);
    await a.start();
    await firstSlow.opened;
    const b = make('b');
    await b.start();
    await waitFor(
      async () => (await db.query(`SELECT FROM ${db.jobs} WHERE queue = $1`, [queue])).length === 0,
      30_000,
      'the queue to drain',
    );
    expect((slowBy.get('a') ?? 0) + (slowBy.get('b') ?? 0)).toBe(60);
    // Held by a alone, b would run none of them: a gives back what it cannot start soon.
    expect(slowBy.get('b') ?? 0).toBeGreaterThanOrEqual(10);
  });

  it('a buffered job not started within prefetchTimeoutMs is given back for any worker', async () => {
    const queue = 'pf-timeout';
    const { worker, slot } = await slotBlockedOnceBuffered(queue, { prefetchTimeoutMs: 300 });
    const runAt = async () =>
      new Map(
        (
          await db.query<{ id: string; run_at: string }>(
            `SELECT id, run_at::text FROM ${db.jobs} WHERE queue = $1 AND status = 'queued'`,
            [queue],
          )
        ).map((r) => [r.id, r.run_at]),
      );
    const enqueuedRunAt = await runAt();
    const releasedEvent = nextEvent(worker, 'job:released', 20_000);
    await worker.start();
    await waitFor(() => slot.blocked, 20_000, 'a job to block while others are buffered');
    await releasedEvent;
    await waitFor(() => worker.bufferedCount === 0, 10_000, 'the buffer to be given back');
    const rows = await jobRows(queue);
    expect(rows.filter((r) => r.status === 'running')).toHaveLength(1);
    const queued = rows.filter((r) => r.status === 'queued');
    expect(queued.length).toBeGreaterThan(0);
    expect(queued.every((r) => r.attempts === 0)).toBe(true);
    // Given back in place: each keeps the run_at it was enqueued with.
    const releasedRunAt = await runAt();
    expect(releasedRunAt.size).toBe(queued.length);
    for (const [id, at] of releasedRunAt) expect(at).toBe(enqueuedRunAt.get(id));
    slot.release();
  });

  it('the jobs of a large claim start highest priority first, then oldest', async () => {
    const queue = 'claim-order';
    // 600 low-priority jobs first (earlier on disk), then 40 urgent ones.
    await skiplock.enqueueMany(
      Array.from({ length: 600 }, (_, i) => ({ kind: 'ordered', payload: { i }, queue })),
    );
    await skiplock.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ kind: 'ordered', payload: { i }, queue, priority: 5 })),
    );
    const started: number[] = [];
    const worker = queueWorker(queue, {
      concurrency: 1,
      handlers: {
        ordered: (job) => {
          started.push(job.priority);
        },
      },
    });
    await worker.start();
    await waitFor(() => started.length === 640, 60_000, '640 jobs started');
    // One slot: the first claims take one job each, then one claim buffers the rest.
    expect(started.slice(0, 40)).toEqual(new Array(40).fill(5));
    expect(started.slice(40)).toEqual(new Array(600).fill(0));
  });
});
