/** Handlers declared as `{ handle, … }`: validated like options, and their timeoutMs applies to their kind. */
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../src/index.js';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

describe('handler definitions', () => {
  it.each([
    [{ k: { handle: 1 } }, 'worker.handlers.k.handle'],
    [{ k: {} }, 'worker.handlers.k.handle'],
    [{ k: { handle: () => {}, maxAttempts: 0 } }, 'worker.handlers.k.maxAttempts'],
    [{ k: { handle: () => {}, maxAttempts: 1.5 } }, 'worker.handlers.k.maxAttempts'],
    [{ k: { handle: () => {}, timeoutMs: 0 } }, 'worker.handlers.k.timeoutMs'],
    [{ k: { handle: () => {}, backoff: -1 } }, 'worker.handlers.k.backoff'],
    [{ k: { handle: () => {}, backoff: 'fast' } }, 'worker.handlers.k.backoff'],
    [{ k: { handle: () => {}, retries: 3 } }, 'worker.handlers.k.retries'],
    [{ k: 'handler' }, 'worker.handlers.k'],
    [{ k: [] }, 'worker.handlers.k'],
  ])('refuses %o naming %s', (handlers, field) => {
    let thrown: unknown;
    try {
      t.skiplock.worker({ handlers: handlers as never });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ValidationError);
    expect((thrown as ValidationError).field).toBe(field);
  });

  it("cuts off an attempt at its kind's timeoutMs, other kinds at the worker's jobTimeoutMs", async () => {
    const worker = t.worker({
      ...base,
      jobTimeoutMs: 60_000,
      handlers: {
        short: { timeoutMs: 100, handle: () => new Promise(() => {}) },
        plain: () => {},
      },
    });
    await worker.start();
    const short = await t.skiplock.enqueue('short', {});
    const plain = await t.skiplock.enqueue('plain', {}, { maxAttempts: 1 });
    await waitFor(
      async () => (await t.row(short.id))?.status === 'queued' && (await t.jobCount()) === 1,
      10_000,
    );
    expect(await t.row(short.id)).toMatchObject({ status: 'queued', attempts: 1 });
    expect((await t.row(short.id))?.last_error).toMatch(/timed out after 100 ms/);
    expect(await t.row(plain.id)).toBeUndefined();
  });
});

describe('handler definition messages', () => {
  it.each([-5, Number.NaN, 2 ** 31, '100'])('backoff %s says what it must be', (backoff) => {
    expect(() => t.skiplock.worker({ handlers: { k: { handle: () => {}, backoff } } as never })).toThrow(
      'worker.handlers.k.backoff: must be a number of milliseconds (0…2147483647) or a function of attempts',
    );
  });
});
