/** Global queue limits in one process: the API, validation, listing, and how a worker routes its claims. */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { JobQueries } from '../src/db/queries/jobs.js';
import { type JobMap, ValidationError, type Worker, type WorkerOptions } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { limitsWith, NO_LIMITS } from './support/queue-limits.js';

const t = useTestDatabase();

async function statuses(queue: string): Promise<Record<string, number>> {
  const rows = await t.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${t.jobs} WHERE queue = $1 GROUP BY status`,
    [queue],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** A handler that waits until `held` opens, and counts how many of its calls ran at once (`max()`, the most). */
function heldHandler() {
  const held = gate();
  let running = 0;
  let max = 0;
  return {
    held,
    max: () => max,
    handle: async () => {
      max = Math.max(max, ++running);
      await held.opened;
      running--;
    },
  };
}

/** A worker of the test that keeps its succeeded jobs: the tests count them by status. */
function keepingWorker(options: WorkerOptions<JobMap>): Worker {
  return t.worker({ onSuccess: 'keep', ...options });
}

/** Waits until `queue` holds `n` jobs of `status`; a timeout shows its jobs by status. */
async function untilStatus(queue: string, status: string, n: number, timeoutMs: number, what: string) {
  await waitFor(
    async () => (await statuses(queue))[status] === n,
    timeoutMs,
    what,
    () => statuses(queue),
  );
}

/** `count` jobs of `kind` on `queue`, with an empty payload, for enqueueMany. */
const jobsOf = (count: number, kind: string, queue: string) =>
  Array.from({ length: count }, () => ({ kind, payload: {}, queue }));

const queueRow = async (name: string) =>
  (
    await t.query(
      `SELECT concurrency_limit, rate_count, rate_period_ms FROM ${tableIn(t.schema, 'queues')} WHERE name = $1`,
      [name],
    )
  )[0];

describe('setQueueLimits', () => {
  it('sets, changes and removes limits field by field; the listing shows them', async () => {
    expect(await t.skiplock.setQueueLimits('api', { concurrency: 4 })).toEqual(
      limitsWith({ concurrency: 4 }),
    );
    expect(await t.skiplock.setQueueLimits('api', { rate: { count: 10, periodMs: 1000 } })).toEqual(
      limitsWith({ concurrency: 4, rate: { count: 10, periodMs: 1000 } }),
    );
    await t.skiplock.enqueue('call', {}, { queue: 'api' });
    expect((await t.skiplock.queues()).find((q) => q.name === 'api')).toEqual({
      name: 'api',
      paused: false,
      pausedAt: null,
      queued: 1,
      running: 0,
      limits: limitsWith({ concurrency: 4, rate: { count: 10, periodMs: 1000 } }),
    });
    expect(await t.skiplock.setQueueLimits('api', { concurrency: null })).toEqual(
      limitsWith({ rate: { count: 10, periodMs: 1000 } }),
    );
    expect(await t.skiplock.setQueueLimits('api', { rate: null })).toEqual(NO_LIMITS);
    expect((await t.skiplock.queues()).find((q) => q.name === 'api')?.limits).toEqual(NO_LIMITS);
    // Limits and pause are independent settings of one row.
    await t.skiplock.pauseQueue('api');
    await t.skiplock.setQueueLimits('api', { concurrency: 2 });
    expect((await t.skiplock.queues()).find((q) => q.name === 'api')).toMatchObject({
      paused: true,
      limits: limitsWith({ concurrency: 2 }),
    });
  });

  it('bad input throws a ValidationError naming the field, and changes nothing', async () => {
    await t.skiplock.setQueueLimits('v', { concurrency: 3, rate: { count: 5, periodMs: 100 } });
    const cases: [unknown, unknown, string][] = [
      ['', { concurrency: 1 }, 'name'],
      ['v', { concurrency: 0 }, 'concurrency'],
      ['v', { concurrency: 1.5 }, 'concurrency'],
      ['v', { concurrency: '2' }, 'concurrency'],
      ['v', { concurrency: 2 ** 31 }, 'concurrency'],
      ['v', { rate: { count: 0, periodMs: 1000 } }, 'rate.count'],
      ['v', { rate: { count: 5, periodMs: 0 } }, 'rate.periodMs'],
      ['v', { rate: { count: 5 } }, 'rate.periodMs'],
      ['v', { rate: { count: 5, periodMs: 10, burst: 2 } }, 'rate.burst'],
      ['v', { rate: 5 }, 'rate'],
      ['v', { concurrency: 2, rate: { count: -1, periodMs: 10 } }, 'rate.count'],
      ['v', { concurrency: 2, speed: 1 }, 'speed'],
      ['v', {}, 'limits'],
      ['v', null, 'limits'],
    ];
    for (const [name, limits, field] of cases) {
      const error = await t.skiplock.setQueueLimits(name as string, limits as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(limits)).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field, JSON.stringify(limits)).toBe(field);
    }
    expect(await queueRow('v')).toEqual({ concurrency_limit: 3, rate_count: 5, rate_period_ms: 100 });
  });

  it('names the range, not integrality, for a number past it', async () => {
    await expect(t.skiplock.setQueueLimits('v', { rate: { count: 5, periodMs: 2 ** 53 } })).rejects.toThrow(
      'rate.periodMs: must be ≤ 2147483647',
    );
    await expect(t.skiplock.setQueueLimits('v', { concurrency: 1.5 })).rejects.toThrow(
      'concurrency: must be an integer',
    );
  });
});

describe('the limited claim', () => {
  it('counts the claims committed while it waited for the lock, even in a REPEATABLE READ session', async () => {
    await t.skiplock.setQueueLimits('lw', { concurrency: 3 });
    const jobs = await t.skiplock.enqueueMany(jobsOf(5, 'step', 'lw'));
    const queries = new JobQueries(t.schema);
    const other = new pg.Pool({
      connectionString: `${t.url}?options=${encodeURIComponent('-c default_transaction_isolation=repeatable\\ read')}`,
      max: 1,
    });
    other.on('error', () => {});
    t.defer(() => other.end());
    // A claim in flight elsewhere: it holds the queue's lock and has taken two jobs, not committed yet.
    const first = await t.db.pool.connect();
    try {
      await first.query('BEGIN');
      await first.query(`SELECT FROM ${tableIn(t.schema, 'queues')} WHERE name = 'lw' FOR UPDATE`);
      await first.query(
        `UPDATE ${t.jobs} SET status = 'running', locked_at = now(), attempts = 1 WHERE id = ANY($1::bigint[])`,
        [[jobs[0]!.id, jobs[1]!.id]],
      );
      const second = queries.limitedClaim.claim(other, {
        queues: ['lw'],
        kinds: ['step'],
        limit: 10,
        workerId: 'second',
        visibilityTimeoutMs: 60_000,
      });
      await waitFor(
        async () =>
          (
            await t.query(
              `SELECT FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'`,
            )
          ).length === 1,
        5000,
        'the second claim to wait for the lock',
      );
      await first.query('COMMIT');
      const claimed = await second;
      expect(claimed.jobs.map((j) => j.id)).toEqual([jobs[2]!.id]);
      expect(claimed.concurrencyRoom).toBe(1);
    } finally {
      first.release();
    }
    expect(await statuses('lw')).toEqual({ running: 3, queued: 2 });
  });
  it('drain() runs limited queues within their limits', async () => {
    await t.skiplock.setQueueLimits('dc', { concurrency: 2 });
    await t.skiplock.setQueueLimits('dr', { rate: { count: 2, periodMs: 600_000 } });
    await t.skiplock.enqueueMany([
      ...jobsOf(5, 'step', 'dc'),
      ...jobsOf(5, 'step', 'dr'),
      { kind: 'step', payload: {}, queue: 'open' },
    ]);
    const result = await drain(t.skiplock, { step: async () => {} }, { onSuccess: 'keep' });
    expect(result).toMatchObject({ succeeded: 8, failed: 0 });
    expect(await statuses('dc')).toEqual({ succeeded: 5 });
    expect(await statuses('dr')).toEqual({ succeeded: 2, queued: 3 });
    expect(await statuses('open')).toEqual({ succeeded: 1 });
  });
});

describe('a worker with limited queues', () => {
  it('runs an unlimited queue at full speed while a limited queue of the same worker is saturated', async () => {
    await t.skiplock.setQueueLimits('slow', { concurrency: 1 });
    const slow = heldHandler();
    const worker = keepingWorker({
      queues: ['slow', 'fast'],
      concurrency: 5,
      pollIntervalMs: 200,
      handlers: {
        slow: slow.handle,
        fast: async () => {},
      },
    });
    await worker.start();
    await t.skiplock.enqueueMany(jobsOf(3, 'slow', 'slow'));
    await untilStatus('slow', 'running', 1, 20_000, 'one slow job to run');
    await t.skiplock.enqueueMany(jobsOf(50, 'fast', 'fast'));
    await untilStatus('fast', 'succeeded', 50, 10_000, 'the fast queue to drain');
    expect(await statuses('slow')).toEqual({ running: 1, queued: 2 });
    slow.held.open();
    await untilStatus('slow', 'succeeded', 3, 10_000, 'the slow queue to drain');
    expect(slow.max()).toBe(1);
  });

  it("a limited queue gets the worker's slots while an unlimited backlog fills its prefetch buffer", async () => {
    await t.skiplock.setQueueLimits('lim', { concurrency: 2 });
    await t.skiplock.enqueueMany(jobsOf(2000, 'bulk', 'bulk'));
    const worker = keepingWorker({
      queues: ['lim', 'bulk'],
      concurrency: 4,
      pollIntervalMs: 60_000,
      handlers: {
        bulk: () => new Promise((resolve) => setTimeout(resolve, 5)),
        lim: () => new Promise((resolve) => setTimeout(resolve, 5)),
      },
    });
    await worker.start();
    await waitFor(() => worker.bufferedCount > 0, 20_000, 'the bulk backlog to fill the buffer');
    await t.skiplock.enqueueMany(jobsOf(10, 'lim', 'lim'));
    await untilStatus('lim', 'succeeded', 10, 10_000, 'the limited queue to run');
    // 2000 bulk jobs of 5 ms on 4 slots take 2.5 s at least: the limited queue did not wait for them.
    expect((await statuses('bulk')).queued).toBeGreaterThan(0);
  });

  it('a running worker is told of a new limit at once, and of its removal', async () => {
    const step = heldHandler();
    const worker = keepingWorker({
      queues: ['told'],
      concurrency: 10,
      // A slow poll: the limits message, not the poll, must carry the change.
      pollIntervalMs: 60_000,
      handlers: { step: step.handle },
    });
    await worker.start();
    await t.skiplock.setQueueLimits('told', { concurrency: 2 });
    // The worker has re-read its limits once it claims no more than two.
    await t.skiplock.enqueueMany(jobsOf(6, 'step', 'told'));
    await untilStatus('told', 'running', 2, 20_000, 'two jobs to run');
    // A claim would have taken them all by now.
    await waitFor(async () => worker.activeCount === 2, 20_000, 'the worker to hold two jobs');
    expect(await statuses('told')).toEqual({ running: 2, queued: 4 });
    await t.skiplock.setQueueLimits('told', { concurrency: null });
    await untilStatus('told', 'running', 6, 20_000, 'all six to run once unlimited');
    // Claimed is not started: a buffered job counts as running in the table before its handler starts.
    await waitFor(() => worker.activeCount === 6, 20_000, 'all six handlers to start');
    step.held.open();
    await untilStatus('told', 'succeeded', 6, 20_000, 'all six to finish');
    expect(step.max()).toBe(6);
  });

  it('a worker gives back the buffered jobs of a queue that becomes limited', async () => {
    const held = gate();
    let blocked = false;
    const worker = keepingWorker({
      queues: ['gb'],
      concurrency: 1,
      prefetch: 10,
      pollIntervalMs: 60_000,
      handlers: {
        step: async () => {
          if (!blocked && worker.bufferedCount > 0) {
            blocked = true;
            await held.opened;
          }
        },
      },
    });
    await t.skiplock.enqueueMany(jobsOf(40, 'step', 'gb'));
    await worker.start();
    await waitFor(() => blocked && worker.bufferedCount > 0, 20_000, 'a blocked handler and a buffer');
    await t.skiplock.setQueueLimits('gb', { concurrency: 2 });
    await waitFor(
      () => worker.bufferedCount === 0,
      5000,
      `the buffer to be given back (${worker.bufferedCount})`,
    );
    // Held jobs count against the limit: only the blocked one is running now.
    await untilStatus('gb', 'running', 1, 20_000, 'the buffered jobs to be queued again');
    held.open();
    await untilStatus('gb', 'succeeded', 40, 10_000, 'the queue to drain');
  });

  it('a paused limited queue is not claimed; resume runs it within its limit', async () => {
    await t.skiplock.setQueueLimits('pl', { concurrency: 2 });
    await t.skiplock.pauseQueue('pl');
    const ran: string[] = [];
    const worker = keepingWorker({
      queues: ['pl', 'open'],
      concurrency: 5,
      handlers: { step: async (job) => void ran.push(job.queue) },
    });
    await worker.start();
    await t.skiplock.enqueueMany(jobsOf(4, 'step', 'pl'));
    // Limited queues are claimed first: once a later job of an open queue ran, the paused one was passed over.
    await t.skiplock.enqueue('step', {}, { queue: 'open' });
    await untilStatus('open', 'succeeded', 1, 20_000, 'the open queue to run');
    expect(await statuses('pl')).toEqual({ queued: 4 });
    await t.skiplock.resumeQueue('pl');
    await untilStatus('pl', 'succeeded', 4, 20_000, 'the queue to run after resume');
    expect(ran.filter((q) => q === 'pl')).toHaveLength(4);
  });

  it('a rate limit paces starts in one worker: the next batch waits for the period', async () => {
    await t.skiplock.setQueueLimits('paced', { rate: { count: 3, periodMs: 700 } });
    const startedAt: number[] = [];
    const worker = t.worker({
      queues: ['paced'],
      concurrency: 10,
      // A slow poll: the worker wakes itself when the rate allows more.
      pollIntervalMs: 60_000,
      handlers: { step: async () => void startedAt.push(performance.now()) },
    });
    await worker.start();
    await t.skiplock.enqueueMany(jobsOf(7, 'step', 'paced'));
    await waitFor(
      () => startedAt.length === 7,
      10_000,
      'seven starts',
      () => startedAt.length,
    );
    // 3 at once, 3 a period later, then 1 (bounds leave room for a loaded machine).
    const t0 = startedAt[0]!;
    const offsets = startedAt.map((at) => at - t0);
    expect(offsets.slice(0, 3).every((o) => o < 300)).toBe(true);
    expect(offsets.slice(3).every((o) => o >= 500)).toBe(true);
    expect(offsets[6]! - offsets[3]!).toBeGreaterThanOrEqual(500);
  });
});
