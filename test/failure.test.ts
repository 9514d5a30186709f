/** What a failed attempt records: a readable last_error, the retry, the timeout. */
import { describe, expect, it } from 'vitest';
import { JobTimeoutError } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { recordThrown } from './support/thrown.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

describe('failures', () => {
  it('records a readable last_error for anything thrown, and keeps the worker running', async () => {
    const thrown: Record<string, unknown> = {
      str: 'plain string',
      undef: undefined,
      obj: { code: 42, detail: 'object' },
      nul: new Error('has \u0000 NUL'),
    };
    const { worker, byKey } = await recordThrown(t, 'throws', thrown);
    expect(byKey.str?.last_error).toBe('plain string');
    expect(byKey.undef?.last_error).toBe('handler threw undefined (not an Error)');
    expect(byKey.obj?.last_error).toBe("handler threw a non-Error value: { code: 42, detail: 'object' }");
    expect(byKey.nul?.last_error).toMatch(/^Error: has \\u0000 NUL/);
    for (const e of Object.values(byKey)) expect(e).toMatchObject({ status: 'queued', attempts: 1 });
    expect(worker.activeCount).toBe(0);
  });

  it('never claims a job of a kind it has no handler for; a worker that has it does', async () => {
    const old = t.worker({ ...base, queues: ['unknown'], handlers: { known: () => {} } });
    await old.start();
    const job = await t.skiplock.enqueue('mystery', {}, { queue: 'unknown' });
    // A later job of a known kind runs, so the claim has passed over the unknown one.
    const known = nextEvent(old, 'job:success');
    await t.skiplock.enqueue('known', {}, { queue: 'unknown' });
    await known;
    expect(await t.row(job.id)).toMatchObject({ status: 'queued', attempts: 0 });
    // A worker of a newer release, with the handler, takes it on its first attempt.
    const ran: number[] = [];
    const fresh = t.worker({
      ...base,
      queues: ['unknown'],
      onSuccess: 'keep',
      handlers: { mystery: (j) => void ran.push(j.attempts) },
    });
    const done = nextEvent(fresh, 'job:success');
    await fresh.start();
    expect((await done)[0].id).toBe(job.id);
    expect(ran).toEqual([1]);
  });

  it('cuts off a handler that never settles at jobTimeoutMs and frees its slot', async () => {
    const ran: string[] = [];
    const worker = t.worker({
      ...base,
      queues: ['timeout'],
      concurrency: 1,
      jobTimeoutMs: 100,
      handlers: {
        hang: () => new Promise(() => {}),
        quick: () => void ran.push('quick'),
      },
    });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    const hung = await t.skiplock.enqueue('hang', {}, { queue: 'timeout', priority: 10 });
    await t.skiplock.enqueue('quick', {}, { queue: 'timeout' });
    const [, thrown, outcome] = await failed;
    expect(thrown).toBeInstanceOf(JobTimeoutError);
    expect(outcome.lastError).toMatch(/^JobTimeoutError: job timed out after 100 ms/);
    expect(outcome.status).toBe('queued');
    await waitFor(
      () => ran.length === 1,
      5000,
      'the quick job after the timeout',
      () => ran,
    );
    expect(ran).toEqual(['quick']);
    expect(await t.row(hung.id)).toMatchObject({ status: 'queued', attempts: 1 });
  });
});
