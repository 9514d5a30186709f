import { describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { recordThrown } from './support/thrown.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100 } as const;

describe('hostile thrown values', () => {
  it('a cyclic cause, throwing getters and a hostile Proxy are recorded, and the worker keeps going', async () => {
    const cyclic = new Error('cyclic');
    cyclic.cause = cyclic;
    const getters = new Error('x');
    Object.defineProperty(getters, 'stack', {
      get() {
        throw new Error('no stack for you');
      },
    });
    const proxy = new Proxy(
      {},
      {
        getPrototypeOf() {
          throw new Error('trap');
        },
      },
    );
    const thrown: Record<string, unknown> = { cyclic, getters, proxy };
    const { worker, byKey } = await recordThrown(t, 'hostile', thrown);
    expect(byKey.cyclic?.last_error).toMatch(/^Error: cyclic[\s\S]*caused by: … \(cause chain cut\)$/);
    expect(byKey.getters?.last_error).toBe(
      'handler threw a value that cannot be described (Error: no stack for you)',
    );
    expect(byKey.proxy?.last_error).toBe('handler threw a value that cannot be described (Error: trap)');
    for (const r of Object.values(byKey)) expect(r).toMatchObject({ status: 'queued', attempts: 1 });
    // Still running: a new job is handled.
    const ok = nextEvent(worker, 'job:failure');
    await t.skiplock.enqueue('throws', { key: 'none' }, { queue: 'hostile' });
    const [, thrownValue, outcome] = await ok;
    expect(thrownValue).toBeUndefined();
    expect(outcome.lastError).toBe('handler threw undefined (not an Error)');
  });

  it('a kind named like an Object.prototype member is not a handler: the worker never claims it', async () => {
    const worker = t.worker({ ...base, queues: ['proto'], handlers: { real: () => {} } });
    const failed = record(worker, 'job:failure');
    await worker.start();
    const kinds = ['toString', 'constructor', 'hasOwnProperty', '__proto__'];
    await t.skiplock.enqueueMany(kinds.map((kind) => ({ kind, payload: {}, queue: 'proto' })));
    // A job of a handled kind enqueued after them is run: the worker claimed past them.
    const done = nextEvent(worker, 'job:success');
    const real = await t.skiplock.enqueue('real', {}, { queue: 'proto' });
    expect((await done)[0].id).toBe(real.id);
    const rows = await t.query<{ kind: string; status: string; attempts: number }>(
      `SELECT kind, status, attempts FROM ${t.jobs} WHERE queue = 'proto' ORDER BY id`,
    );
    expect(rows).toEqual(kinds.map((kind) => ({ kind, status: 'queued', attempts: 0 })));
    expect(failed).toEqual([]);
  });
});

describe('life cycle races', () => {
  it('stop() during start() leaves nothing running', async () => {
    let ran = 0;
    const worker = t.worker({
      ...base,
      queues: ['race-stop'],
      handlers: {
        x: () => {
          ran++;
        },
      },
    });
    const started = worker.start();
    await worker.stop();
    await started;
    const job = await t.skiplock.enqueue('x', {}, { queue: 'race-stop' });
    // Another worker proves the job is claimable: the stopped one never took it.
    const other = t.worker({ ...base, queues: ['race-stop'], handlers: { x: () => {} } });
    const done = nextEvent(other, 'job:success');
    await other.start();
    expect((await done)[0]).toMatchObject({ id: job.id, attempts: 1 });
    expect(ran).toBe(0);
  });

  it('start() twice at once starts once', async () => {
    const worker = t.worker({ ...base, queues: ['race-start'], handlers: {}, maintenanceOnly: true });
    const results = await Promise.allSettled([worker.start(), worker.start()]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    // One LISTEN connection (a closed one may linger in pg_stat_activity for a moment).
    await waitFor(
      async () => {
        const [row] = await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`,
        );
        return row!.n === 1;
      },
      5000,
      'exactly one LISTEN connection',
    );
  });
});
