/** Group keys in one process: the options, the limits' storage, fairness, strict order, and which claim a queue gets. */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Skiplock, SnoozeError, ValidationError } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { NO_LIMITS } from './support/queue-limits.js';

const t = useTestDatabase();

async function errorOf(promise: Promise<unknown>): Promise<ValidationError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ValidationError);
  return error as ValidationError;
}

/**
 * Starts a worker of `queue` whose `entry` handler records `start <n>#<attempt>`
 * and fails job `n: 1` until its attempt `succeedsOnAttempt`, each retry after
 * `backoffMs`; returns the records, filled as the jobs run.
 */
async function startEntryWorker(
  queue: string,
  backoffMs: number,
  succeedsOnAttempt: number,
): Promise<string[]> {
  const events: string[] = [];
  const worker = t.worker({
    queues: [queue],
    concurrency: 4,
    pollIntervalMs: 100,
    handlers: {
      entry: {
        backoff: backoffMs,
        handle: async (job) => {
          const n = (job.payload as { n: number }).n;
          events.push(`start ${n}#${job.attempts}`);
          if (n === 1 && job.attempts < succeedsOnAttempt) throw new Error('not yet');
        },
      },
    },
  });
  await worker.start();
  return events;
}

describe('group keys and group limits', () => {
  it('stores the group key of enqueue, enqueueMany and unique jobs; bad keys name the field', async () => {
    const one = await t.skiplock.enqueue('k', {}, { groupKey: 'tenant-1' });
    const [a, b] = await t.skiplock.enqueueMany([
      { kind: 'k', payload: {}, groupKey: 'tenant-2' },
      { kind: 'k', payload: {} },
    ]);
    const unique = await t.skiplock.enqueue('k', {}, { groupKey: 'tenant-3', uniqueKey: 'u1' });
    const plain = await t.skiplock.enqueue('k', {});
    const keys = await t.query<{ id: string; group_key: string | null }>(
      `SELECT id::text, group_key FROM ${t.jobs} ORDER BY id`,
    );
    expect(keys).toEqual([
      { id: one.id, group_key: 'tenant-1' },
      { id: a!.id, group_key: 'tenant-2' },
      { id: b!.id, group_key: null },
      { id: unique.id, group_key: 'tenant-3' },
      { id: plain.id, group_key: null },
    ]);
    expect((await errorOf(t.skiplock.enqueue('k', {}, { groupKey: '' }))).field).toBe('options.groupKey');
    expect((await errorOf(t.skiplock.enqueue('k', {}, { groupKey: 'x'.repeat(201) }))).field).toBe(
      'options.groupKey',
    );
    expect((await errorOf(t.skiplock.enqueue('k', {}, { groupKey: 7 as unknown as string }))).field).toBe(
      'options.groupKey',
    );
    for (const unstorable of ['nul\u0000key', 'lone \ud800'])
      expect((await errorOf(t.skiplock.enqueue('k', {}, { groupKey: unstorable }))).field).toBe(
        'options.groupKey',
      );
    expect(
      (
        await errorOf(
          t.skiplock.enqueueMany([
            { kind: 'k', payload: {} },
            { kind: 'k', payload: {}, groupKey: '' },
          ]),
        )
      ).field,
    ).toBe('jobs[1].groupKey');
    expect(await t.jobCount()).toBe(5);
  });

  it('sets, lists and removes group limits; bad input names the field and changes nothing', async () => {
    expect(
      await t.skiplock.setQueueLimits('g', {
        groupConcurrency: 2,
        groupRate: { count: 5, periodMs: 1000 },
        strictOrder: true,
      }),
    ).toEqual({
      concurrency: null,
      rate: null,
      groupConcurrency: 2,
      groupRate: { count: 5, periodMs: 1000 },
      strictOrder: true,
    });
    expect(await t.skiplock.setQueueLimits('g', { concurrency: 4 })).toEqual({
      concurrency: 4,
      rate: null,
      groupConcurrency: 2,
      groupRate: { count: 5, periodMs: 1000 },
      strictOrder: true,
    });
    const cases: [unknown, string][] = [
      [{ groupConcurrency: 0 }, 'groupConcurrency'],
      [{ groupConcurrency: 1.5 }, 'groupConcurrency'],
      [{ groupRate: { count: 0, periodMs: 10 } }, 'groupRate.count'],
      [{ groupRate: { count: 1, periodMs: 0 } }, 'groupRate.periodMs'],
      [{ groupRate: 3 }, 'groupRate'],
      [{ strictOrder: 'yes' }, 'strictOrder'],
      [{ strictOrder: null }, 'strictOrder'],
    ];
    for (const [limits, field] of cases) {
      expect(
        (await errorOf(t.skiplock.setQueueLimits('g', limits as never))).field,
        JSON.stringify(limits),
      ).toBe(field);
    }
    expect((await t.skiplock.queues()).find((q) => q.name === 'g')?.limits).toEqual({
      concurrency: 4,
      rate: null,
      groupConcurrency: 2,
      groupRate: { count: 5, periodMs: 1000 },
      strictOrder: true,
    });
    expect(
      await t.skiplock.setQueueLimits('g', {
        concurrency: null,
        groupConcurrency: null,
        groupRate: null,
        strictOrder: false,
      }),
    ).toEqual(NO_LIMITS);
  });

  it('groupRate caps the starts of each key per period; jobs without a key run beside the keys', async () => {
    await t.skiplock.setQueueLimits('paced', { groupRate: { count: 3, periodMs: 600_000 } });
    await t.skiplock.enqueueMany([
      ...Array.from({ length: 5 }, () => ({ kind: 'step', payload: {}, queue: 'paced', groupKey: 'a' })),
      ...Array.from({ length: 2 }, () => ({ kind: 'step', payload: {}, queue: 'paced', groupKey: 'b' })),
      ...Array.from({ length: 4 }, () => ({ kind: 'step', payload: {}, queue: 'paced' })),
    ]);
    const result = await drain(t.skiplock, { step: async () => {} }, { onSuccess: 'keep' });
    expect(result).toMatchObject({ succeeded: 9, failed: 0 });
    const rows = await t.query(
      `SELECT group_key, status, count(*)::int AS n FROM ${t.jobs} GROUP BY 1, 2 ORDER BY 1 NULLS LAST, 2`,
    );
    expect(rows).toEqual([
      { group_key: 'a', status: 'queued', n: 2 },
      { group_key: 'a', status: 'succeeded', n: 3 },
      { group_key: 'b', status: 'succeeded', n: 2 },
      { group_key: null, status: 'succeeded', n: 4 },
    ]);
    // Removing the rate forgets its log: the key's remaining jobs run.
    await t.skiplock.setQueueLimits('paced', { groupRate: null, groupConcurrency: 1 });
    expect(await t.query(`SELECT count(*)::int AS n FROM ${tableIn(t.schema, 'group_rate_slots')}`)).toEqual([
      { n: 0 },
    ]);
    expect(await drain(t.skiplock, { step: async () => {} }, { onSuccess: 'keep' })).toMatchObject({
      succeeded: 2,
    });
  });

  it('a job past its start deadline is never claimed and holds nothing, even under strictOrder', async () => {
    await t.skiplock.setQueueLimits('late', { groupConcurrency: 1, strictOrder: true });
    const expired = await t.skiplock.enqueue(
      'step',
      {},
      { queue: 'late', groupKey: 'k', startBy: new Date(Date.now() - 60_000) },
    );
    const next = await t.skiplock.enqueue('step', {}, { queue: 'late', groupKey: 'k' });
    expect(await drain(t.skiplock, { step: async () => {} }, { onSuccess: 'keep' })).toMatchObject({
      succeeded: 1,
    });
    expect((await t.row(expired.id))?.status).toBe('queued');
    expect((await t.row(next.id))?.status).toBe('succeeded');
  });

  it('a key held by its group rate starts again when its oldest start leaves the window, not at the next poll', async () => {
    await t.skiplock.setQueueLimits('paced-worker', { groupRate: { count: 2, periodMs: 1500 } });
    await t.skiplock.enqueueMany(
      Array.from({ length: 5 }, (_, i) => ({
        kind: 'step',
        payload: { i },
        queue: 'paced-worker',
        groupKey: 'k',
      })),
    );
    const worker = t.worker({
      queues: ['paced-worker'],
      concurrency: 4,
      // Only the rate's own wake-up can start the later jobs before this deadline.
      pollIntervalMs: 120_000,
      handlers: { step: async () => {} },
    });
    await worker.start();
    await waitFor(
      async () => (await t.jobCount()) === 0,
      30_000,
      'the key to drain at its rate',
      () => t.query(`SELECT id, status, attempts, run_at, now() AS now FROM ${t.jobs} ORDER BY id`),
    );
  });

  it('claims keys round-robin: a small key enqueued behind a big backlog starts before the big key’s 100th job', async () => {
    await t.skiplock.setQueueLimits('fair', { groupConcurrency: 100 });
    const enqueueKey = (key: string, count: number) =>
      t.skiplock.enqueueMany(
        Array.from({ length: count }, (_, i) => ({
          kind: 'step',
          payload: { key, i },
          queue: 'fair',
          groupKey: key,
        })),
      );
    await enqueueKey('big', 2000);
    await enqueueKey('small', 10);
    const started: string[] = [];
    const worker = t.worker({
      queues: ['fair'],
      concurrency: 8,
      handlers: {
        step: async (job) => {
          started.push((job.payload as { key: string }).key);
        },
      },
    });
    await worker.start();
    await waitFor(
      () =>
        started.filter((k) => k === 'small').length === 10 &&
        started.filter((k) => k === 'big').length >= 100,
      60_000,
      'the small key and 100 jobs of the big one to start',
    );
    const lastSmall = started.lastIndexOf('small');
    let big = 0;
    let hundredthBig = -1;
    for (let i = 0; i < started.length && hundredthBig < 0; i++)
      if (started[i] === 'big' && ++big === 100) hundredthBig = i;
    expect(lastSmall).toBeLessThan(hundredthBig);
  });

  it('strictOrder: a key’s failing first job holds the key’s next job until it succeeds; other keys go on', async () => {
    await t.skiplock.setQueueLimits('ledger', { groupConcurrency: 1, strictOrder: true });
    const first = await t.skiplock.enqueue('entry', { n: 1 }, { queue: 'ledger', groupKey: 'acct' });
    const second = await t.skiplock.enqueue('entry', { n: 2 }, { queue: 'ledger', groupKey: 'acct' });
    const other = await t.skiplock.enqueue('entry', { n: 3 }, { queue: 'ledger', groupKey: 'other' });
    const events = await startEntryWorker('ledger', 500, 3);
    await waitFor(
      async () => (await t.jobCount(`status = 'queued' OR status = 'running'`)) === 0,
      30_000,
      'every job to finish',
      () => events,
    );
    expect(events.filter((e) => e.startsWith('start 1') || e.startsWith('start 2'))).toEqual([
      'start 1#1',
      'start 1#2',
      'start 1#3',
      'start 2#1',
    ]);
    expect(events).toContain('start 3#1');
    expect(events.indexOf('start 3#1')).toBeLessThan(events.indexOf('start 1#3'));
    expect([first.id, second.id, other.id].length).toBe(3);
  });

  it('strictOrder: a first attempt snoozed, or given back at a stop, keeps its place before the key’s later jobs', async () => {
    await t.skiplock.setQueueLimits('ledger', { groupConcurrency: 1, strictOrder: true });
    await t.skiplock.enqueueMany(
      [1, 2, 3].map((n) => ({ kind: 'entry', payload: { n }, queue: 'ledger', groupKey: 'acct' })),
    );
    // The first worker holds job 1 past its shutdown timeout: the stop gives it back.
    const held = gate();
    const stopping = t.worker({
      queues: ['ledger'],
      pollIntervalMs: 100,
      shutdownTimeoutMs: 200,
      handlers: { entry: () => held.opened },
    });
    await stopping.start();
    await waitFor(async () => (await t.jobCount("status = 'running'")) === 1, 20_000, 'job 1 to start');
    await stopping.stop();
    held.open();
    expect(await t.jobCount("status = 'queued' AND attempts = 0")).toBe(3);
    const events: string[] = [];
    const worker = t.worker({
      queues: ['ledger'],
      pollIntervalMs: 100,
      handlers: {
        entry: (job) => {
          const n = (job.payload as { n: number }).n;
          events.push(`start ${n}`);
          // Job 1's first attempt here snoozes: its attempt is given back.
          if (n === 1 && events.length === 1) throw new SnoozeError(300);
        },
      },
    });
    await worker.start();
    await waitFor(
      async () => (await t.jobCount()) === 0,
      30_000,
      'every job to finish',
      () => events,
    );
    expect(events).toEqual(['start 1', 'start 1', 'start 2', 'start 3']);
  });

  it('without strictOrder, a key’s next job does not wait for a retry', async () => {
    await t.skiplock.setQueueLimits('loose', { groupConcurrency: 1 });
    await t.skiplock.enqueue('entry', { n: 1 }, { queue: 'loose', groupKey: 'acct' });
    await t.skiplock.enqueue('entry', { n: 2 }, { queue: 'loose', groupKey: 'acct' });
    const events = await startEntryWorker('loose', 2000, 2);
    await waitFor(
      () => events.length === 3,
      30_000,
      'three starts',
      () => events,
    );
    expect(events).toEqual(['start 1#1', 'start 2#1', 'start 1#2']);
  });

  it('an ungrouped queue is claimed by the ordinary claim statement, a grouped one by the grouped claim', async () => {
    // The worker's pools copy this pool's settings, its Client class too: every statement is seen.
    const used = new Map<string, string>();
    class SeenClient extends pg.Client {
      override query(config: unknown, ...rest: unknown[]): never {
        const c = config as { name?: string; text?: string } | null;
        if (typeof c === 'object' && c !== null && typeof c.name === 'string' && c.name.includes('claim'))
          used.set(c.name.slice(c.name.indexOf('claim')).replace(/_[0-9a-f]{8}$/, ''), c.text ?? '');
        return (super.query as (...args: unknown[]) => never)(config, ...rest);
      }
    }
    const pool = new pg.Pool({ connectionString: t.url, max: 4, Client: SeenClient });
    pool.on('error', () => {});
    t.defer(() => pool.end());
    const skiplock = new Skiplock({ pool, schema: t.schema });
    await skiplock.setQueueLimits('grouped', { groupConcurrency: 1 });
    await skiplock.enqueue('step', {}, { queue: 'plain' });
    await skiplock.enqueue('step', {}, { queue: 'grouped', groupKey: 'a' });
    const worker = t.track(
      skiplock.worker({
        queues: ['plain', 'grouped'],
        handlers: { step: async () => {} },
        handleSignals: false,
      }),
    );
    await worker.start();
    await waitFor(async () => (await t.jobCount()) === 0, 20_000, 'both jobs to finish');
    // The first claim of a limited queue sends the plain limited statement, which finds group limits and
    // claims nothing; the grouped statement follows at once.
    expect([...used.keys()].sort()).toEqual(['claim', 'claim_grouped', 'claim_limited']);
    const plain = used.get('claim')!;
    expect(plain).not.toContain('group_key');
    expect(plain).toMatch(/ORDER BY priority DESC, run_at\s+LIMIT \$2\s+FOR UPDATE SKIP LOCKED/);
    const row = (
      await t.query(
        `SELECT group_concurrency, strict_order FROM ${tableIn(t.schema, 'queues')} WHERE name = 'grouped'`,
      )
    )[0];
    expect(row).toEqual({ group_concurrency: 1, strict_order: false });
  });
});
