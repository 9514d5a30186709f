/**
 * A kind's policy from its handler definition: `maxAttempts` for jobs whose
 * producer left it out (an explicit enqueue option wins, 20 included), and
 * `backoff` as the retry delay (a throwing or bad function falls back to the
 * default rule). Worker and `drain` alike.
 */
import { describe, expect, it } from 'vitest';
import { withTransaction } from '../src/db/executor.js';
import { JobQueries } from '../src/db/queries/jobs.js';
import type { JobMap, WorkerOptions } from '../src/index.js';
import { runDueSchedules } from '../src/schedule/scheduler.js';
import { drain } from '../src/testing/index.js';
import { tableIn, waitFor } from './support/database.js';
import { eventOf, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

const fail = () => {
  throw new Error('boom');
};

interface PolicyRow {
  status: string;
  attempts: number;
  max_attempts: number;
  max_attempts_default: boolean;
}

/** A policy row, as a test expects it. */
function policy(
  status: string,
  attempts: number,
  max_attempts: number,
  max_attempts_default: boolean,
): PolicyRow {
  return { status, attempts, max_attempts, max_attempts_default };
}

async function policyRow(id: string): Promise<PolicyRow | undefined> {
  const [row] = await t.query<PolicyRow>(
    `SELECT status, attempts, max_attempts, max_attempts_default FROM ${t.jobs} WHERE id = $1`,
    [id],
  );
  return row;
}

/** Milliseconds from the database's now to the job's run_at. */
async function dueInMs(id: string): Promise<number> {
  const [row] = await t.query<{ ms: number }>(
    `SELECT (EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS ms FROM ${t.jobs} WHERE id = $1`,
    [id],
  );
  return row!.ms;
}

async function untilStatus(id: string, status: string, timeoutMs = 20_000): Promise<PolicyRow> {
  return waitFor(
    async () => {
      const row = await policyRow(id);
      return row?.status === status ? row : undefined;
    },
    timeoutMs,
    `job ${id} to be ${status}`,
    () => policyRow(id),
  );
}

describe('a kind’s maxAttempts', () => {
  it('ends its jobs dead after exactly that many attempts, by every way of enqueueing; other kinds keep 20', async () => {
    const runs = new Map<string, number[]>();
    const failing = (job: { id: string; attempts: number }) => {
      runs.set(job.id, [...(runs.get(job.id) ?? []), job.attempts]);
      fail();
    };
    const worker = t.worker({
      ...base,
      handlers: {
        limited: { maxAttempts: 2, backoff: 0, handle: failing },
        plain: { backoff: 3_600_000, handle: failing },
      },
    });
    await worker.start();
    const one = await t.skiplock.enqueue('limited', {});
    const [many] = await t.skiplock.enqueueMany([{ kind: 'limited', payload: {} }]);
    const unique = await t.skiplock.enqueue('limited', {}, { uniqueKey: 'u1' });
    const failures = record(worker, 'job:failure');
    const plain = await t.skiplock.enqueue('plain', {});
    // Left out: the producer's row holds 20, marked as a default.
    expect(one.maxAttempts).toBe(20);
    for (const job of [one, many!, unique]) {
      expect(await untilStatus(job.id, 'dead')).toEqual(policy('dead', 2, 2, true));
      expect(runs.get(job.id)).toEqual([1, 2]);
    }
    const [failed, , info] = await waitFor(() => failures.find(([job]) => job.id === plain.id), 10_000);
    expect(failed.maxAttempts).toBe(20);
    expect(info.status).toBe('queued');
    expect(await policyRow(plain.id)).toEqual(policy('queued', 1, 20, true));
  });

  it('yields to an explicit enqueue option, 5 and 20 alike', async () => {
    const worker = t.worker({
      ...base,
      handlers: { limited: { maxAttempts: 2, backoff: 0, handle: fail } },
    });
    const five = await t.skiplock.enqueue('limited', {}, { maxAttempts: 5 });
    const [twenty] = await t.skiplock.enqueueMany([{ kind: 'limited', payload: {}, maxAttempts: 20 }]);
    const uniqueFive = await t.skiplock.enqueue('limited', {}, { maxAttempts: 5, uniqueKey: 'u5' });
    expect(await policyRow(five.id)).toMatchObject({ max_attempts: 5, max_attempts_default: false });
    expect(await policyRow(twenty!.id)).toMatchObject({ max_attempts: 20, max_attempts_default: false });
    await worker.start();
    expect(await untilStatus(five.id, 'dead')).toEqual(policy('dead', 5, 5, false));
    expect(await untilStatus(uniqueFive.id, 'dead')).toMatchObject({ attempts: 5, max_attempts: 5 });
    expect(await untilStatus(twenty!.id, 'dead', 60_000)).toEqual(policy('dead', 20, 20, false));
  });

  it('applies to a plain SQL insert without max_attempts; one that names it (5, or 20) keeps it', async () => {
    const insert = async (columns: string, values: string) =>
      (
        await t.query<{ id: string }>(`INSERT INTO ${t.jobs} (${columns}) VALUES (${values}) RETURNING id`)
      )[0]!.id;
    const left = await insert('kind, payload', `'limited', '{}'`);
    const keyed = await insert('kind, unique_key', `'limited', 'plain:1'`);
    const five = await insert('kind, max_attempts', `'limited', 5`);
    const twenty = await insert('kind, max_attempts', `'limited', 20`);
    // What a reader sees before any claim: the default, 20, marked as one.
    expect(await policyRow(left)).toEqual(policy('queued', 0, 20, true));
    expect(await policyRow(twenty)).toMatchObject({ max_attempts: 20, max_attempts_default: false });
    const worker = t.worker({
      ...base,
      handlers: { limited: { maxAttempts: 2, backoff: 0, handle: fail } },
    });
    await worker.start();
    for (const id of [left, keyed]) {
      expect(await untilStatus(id, 'dead')).toEqual(policy('dead', 2, 2, true));
    }
    expect(await untilStatus(five, 'dead')).toEqual(policy('dead', 5, 5, false));
    expect(await untilStatus(twenty, 'dead', 60_000)).toEqual(policy('dead', 20, 20, false));
  });

  it("a 'replace' without maxAttempts gives the holder back to the kind; with it, pins it", async () => {
    const held = await t.skiplock.enqueue('limited', { v: 1 }, { uniqueKey: 'k', maxAttempts: 9 });
    await t.skiplock.enqueue('limited', { v: 2 }, { uniqueKey: 'k', onConflict: 'replace' });
    expect(await policyRow(held.id)).toMatchObject({ max_attempts: 20, max_attempts_default: true });
    await t.skiplock.enqueue('limited', { v: 3 }, { uniqueKey: 'k', onConflict: 'replace', maxAttempts: 4 });
    expect(await policyRow(held.id)).toMatchObject({ max_attempts: 4, max_attempts_default: false });
  });

  it('applies to jobs of schedules made without maxAttempts, not to those made with it', async () => {
    await t.skiplock.schedule('left-out', '* * * * *', 'limited', {});
    await t.skiplock.schedule('given', '* * * * *', 'limited', {}, { maxAttempts: 7, overlap: 'allow' });
    expect((await t.skiplock.schedules()).map((s) => [s.name, s.maxAttempts])).toEqual([
      ['given', 7],
      ['left-out', 20],
    ]);
    await t.query(`UPDATE ${tableIn(t.schema, 'schedules')} SET next_run_at = now() - interval '1 second'`);
    const queries = new JobQueries(t.schema);
    const turn = await withTransaction(t.skiplock.pool, (client) => runDueSchedules(client, queries));
    expect(turn.enqueued).toBe(2);
    const rows = await t.query<{ max_attempts: number; max_attempts_default: boolean }>(
      `SELECT max_attempts, max_attempts_default FROM ${t.jobs} ORDER BY max_attempts`,
    );
    expect(rows).toEqual([
      { max_attempts: 7, max_attempts_default: false },
      { max_attempts: 20, max_attempts_default: true },
    ]);
  });

  it('keeps the default flag through a requeue: the kind’s maxAttempts of the next claim applies', async () => {
    const first = t.worker({ ...base, handlers: { limited: { maxAttempts: 1, backoff: 0, handle: fail } } });
    await first.start();
    const job = await t.skiplock.enqueue('limited', {});
    expect(await untilStatus(job.id, 'dead')).toMatchObject({ attempts: 1, max_attempts: 1 });
    await first.stop();
    // A later release declares 2.
    const second = t.worker({ ...base, handlers: { limited: { maxAttempts: 2, backoff: 0, handle: fail } } });
    await second.start();
    expect(await t.skiplock.requeue({ ids: [job.id] })).toBe(1);
    expect(await untilStatus(job.id, 'dead')).toEqual(policy('dead', 2, 2, true));
  });

  it('applies on a queue with global limits too (the limited claim)', async () => {
    await t.skiplock.setQueueLimits('capped', { concurrency: 1 });
    const worker = t.worker({
      ...base,
      queues: ['capped'],
      handlers: { limited: { maxAttempts: 2, backoff: 0, handle: fail } },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('limited', {}, { queue: 'capped' });
    expect(await untilStatus(job.id, 'dead')).toEqual(policy('dead', 2, 2, true));
  });

  it('is honoured by drain, with the kind’s backoff', async () => {
    const job = await t.skiplock.enqueue('limited', {});
    const result = await drain(t.skiplock, { limited: { maxAttempts: 3, backoff: 0, handle: fail } });
    expect(result.failed).toBe(3);
    expect(result.jobs.map((j) => [j.job.attempts, j.status])).toEqual([
      [1, 'queued'],
      [2, 'queued'],
      [3, 'dead'],
    ]);
    expect(await policyRow(job.id)).toMatchObject({ status: 'dead', attempts: 3, max_attempts: 3 });
  });
});

describe('a kind’s backoff', () => {
  /** Starts a worker with `handlers`, enqueues a `k` job, and expects its first attempt to fail into a retry; resolves with the job's id and the failure's outcome. */
  async function firstRetry(handlers: WorkerOptions<JobMap>['handlers']) {
    const worker = t.worker({ ...base, handlers });
    await worker.start();
    const [job, [, , info]] = await eventOf(worker, 'job:failure', () => t.skiplock.enqueue('k', {}));
    expect(info.status).toBe('queued');
    return { id: job.id, info };
  }

  it('a number is the retry delay', async () => {
    const { id, info } = await firstRetry({ k: { backoff: 5000, handle: fail } });
    expect(info.retryDelayMs).toBeGreaterThanOrEqual(4999);
    expect(info.retryDelayMs).toBeLessThanOrEqual(5000);
    const due = await dueInMs(id);
    // Read after the failure was written: the delay less the time since.
    expect(due).toBeGreaterThan(0);
    expect(due).toBeLessThanOrEqual(5000);
  });

  it('a function gets the attempts made so far and gives the delay', async () => {
    const seen: number[] = [];
    const worker = t.worker({
      ...base,
      handlers: {
        k: {
          maxAttempts: 3,
          backoff: (attempts) => {
            seen.push(attempts);
            return attempts === 1 ? 0 : 3_600_000;
          },
          handle: fail,
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('k', {});
    await waitFor(async () => (await policyRow(job.id))?.attempts === 2 && seen.length === 2, 20_000);
    await waitFor(async () => (await policyRow(job.id))?.status === 'queued', 10_000);
    expect(seen).toEqual([1, 2]);
    const due = await dueInMs(job.id);
    expect(due).toBeGreaterThan(3_600_000 - 60_000);
    expect(due).toBeLessThanOrEqual(3_600_000);
  });

  it.each([
    [
      'throws',
      () => {
        throw new Error('bad backoff');
      },
    ],
    ['returns NaN', () => Number.NaN],
    ['returns a negative number', () => -5],
  ])('a function that %s falls back to the default rule', async (_, backoff) => {
    const { id, info } = await firstRetry({ k: { backoff, handle: fail } });
    // The default rule after attempt 1: 2 s × a factor in [0.5, 1).
    expect(info.retryDelayMs).toBeGreaterThanOrEqual(1000);
    expect(info.retryDelayMs).toBeLessThan(2000);
    expect(await dueInMs(id)).toBeLessThan(2000);
  });

  it('a kind without one keeps the default rule', async () => {
    const { info } = await firstRetry({ k: fail, other: { backoff: 0, handle: fail } });
    expect(info.retryDelayMs).toBeGreaterThanOrEqual(1000);
    expect(info.retryDelayMs).toBeLessThan(2000);
  });
});
