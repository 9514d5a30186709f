/** What a failed attempt records: a readable last_error, the retry, the timeout. */
import { describe, expect, it } from 'vitest';
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

  it('fails a job of an unknown kind (retryable), naming the kind', async () => {
    const worker = t.worker({ ...base, queues: ['unknown'], handlers: { known: () => {} } });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    const job = await t.skiplock.enqueue('mystery', {}, { queue: 'unknown' });
    const [, error, outcome] = await failed;
    expect(outcome.status).toBe('queued');
    expect(error).toContain('no handler for kind "mystery"');
    expect(await t.row(job.id)).toMatchObject({ status: 'queued', attempts: 1 });
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
    const [, error, outcome] = await failed;
    expect(error).toMatch(/^JobTimeoutError: job timed out after 100 ms/);
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
