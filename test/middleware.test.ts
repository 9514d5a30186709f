/**
 * Worker middleware: hooks around every attempt, the first the outermost,
 * composed once per kind. What a middleware returns or throws is the
 * attempt's outcome; the job's timeout and the signal cover the whole chain;
 * `drain()` runs the same chain.
 */
import { describe, expect, it } from 'vitest';
import {
  type Middleware,
  PermanentError,
  type TransactionalHandlerContext,
  ValidationError,
} from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

/** Waits until the job's row has `status`; returns the row. */
async function untilStatus(id: string, status: string) {
  return waitFor(
    async () => {
      const row = await t.row(id);
      return row?.status === status ? row : undefined;
    },
    20_000,
    `job ${id} to be ${status}`,
    () => t.row(id),
  );
}

describe('worker middleware', () => {
  it('runs around the handler in order, the first outermost, with the job, the context and the handler’s value', async () => {
    const trail: string[] = [];
    const seen: { kind: string; payload: unknown; hasSignal: boolean; value: unknown }[] = [];
    const outer: Middleware = async (job, context, next) => {
      trail.push(`outer in ${job.kind}`);
      const value = await next();
      seen.push({
        kind: job.kind,
        payload: job.payload,
        hasSignal: context.signal instanceof AbortSignal,
        value,
      });
      trail.push('outer out');
      return value;
    };
    const inner: Middleware = async (_job, _context, next) => {
      trail.push('inner in');
      const value = await next();
      trail.push('inner out');
      return value;
    };
    const worker = t.worker({
      ...base,
      onSuccess: 'keep',
      middleware: [outer, inner],
      handlers: {
        greet: async (job) => {
          trail.push('handler');
          return `hello ${(job.payload as { name: string }).name}`;
        },
      },
    });
    await worker.start();
    const { id } = await t.skiplock.enqueue('greet', { name: 'ada' });
    expect(await untilStatus(id, 'succeeded')).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(trail).toEqual(['outer in greet', 'inner in', 'handler', 'inner out', 'outer out']);
    expect(seen).toEqual([{ kind: 'greet', payload: { name: 'ada' }, hasSignal: true, value: 'hello ada' }]);
  });

  it('decides the outcome: a throw fails the attempt as a handler’s would, and not calling next skips the handler', async () => {
    let handled = 0;
    const guard: Middleware = async (job, _context, next) => {
      const { mode } = job.payload as { mode: string };
      if (mode === 'refuse') throw new PermanentError('refused by the guard');
      if (mode === 'skip') return undefined;
      return next();
    };
    const worker = t.worker({
      ...base,
      onSuccess: 'keep',
      middleware: [guard],
      handlers: {
        work: async (job) => {
          handled++;
          if ((job.payload as { mode: string }).mode === 'fail') throw new Error('the handler failed');
        },
      },
    });
    await worker.start();
    const refused = await t.skiplock.enqueue('work', { mode: 'refuse' });
    const skipped = await t.skiplock.enqueue('work', { mode: 'skip' });
    const failed = await t.skiplock.enqueue('work', { mode: 'fail' }, { maxAttempts: 1 });
    expect(await untilStatus(refused.id, 'failed')).toEqual({
      status: 'failed',
      attempts: 1,
      locked_by: null,
      last_error: expect.stringContaining('refused by the guard'),
    });
    expect(await untilStatus(skipped.id, 'succeeded')).toMatchObject({ attempts: 1, last_error: null });
    // The handler's own error passes through the middleware unchanged.
    expect(await untilStatus(failed.id, 'dead')).toMatchObject({
      attempts: 1,
      last_error: expect.stringContaining('the handler failed'),
    });
    expect(handled).toBe(1);
  });

  it('is covered by the job’s timeout: a middleware that never settles fails the attempt, its signal aborted', async () => {
    let aborted: unknown;
    const stuck: Middleware = (_job, context) =>
      new Promise(() => {
        context.signal.addEventListener('abort', () => {
          aborted = context.signal.reason;
        });
      });
    const worker = t.worker({
      ...base,
      jobTimeoutMs: 300,
      middleware: [stuck],
      handlers: { slow: async () => {} },
    });
    await worker.start();
    const { id } = await t.skiplock.enqueue('slow', {}, { maxAttempts: 1 });
    expect(await untilStatus(id, 'dead')).toMatchObject({
      attempts: 1,
      last_error: expect.stringMatching(/timed out|timeout/i),
    });
    expect(aborted).toBeInstanceOf(Error);
    expect((aborted as Error).name).toBe('JobTimeoutError');
  });

  it('wraps transactional handlers too, with the transaction’s client in the context', async () => {
    const clients: boolean[] = [];
    const worker = t.worker({
      ...base,
      onSuccess: 'keep',
      middleware: [
        async (_job, context, next) => {
          clients.push(typeof (context as { client?: { query?: unknown } }).client?.query === 'function');
          return next();
        },
      ],
      handlers: {
        tx: {
          transactional: true,
          handle: async (_job, { client }: TransactionalHandlerContext) => {
            await client.query('SELECT 1');
          },
        },
      },
    });
    await worker.start();
    const { id } = await t.skiplock.enqueue('tx', {});
    expect(await untilStatus(id, 'succeeded')).toMatchObject({ attempts: 1 });
    expect(clients).toEqual([true]);
  });

  it('refuses what is not an array of functions, naming the field, before the worker exists', () => {
    const handlers = { a: async () => {} };
    expect(() => t.skiplock.worker({ handlers, middleware: [42 as never] })).toThrow(ValidationError);
    expect(() => t.skiplock.worker({ handlers, middleware: [42 as never] })).toThrow(/worker\.middleware/);
    expect(() => t.skiplock.worker({ handlers, middleware: 'log' as never })).toThrow(/worker\.middleware/);
  });
});

describe('drain() and middleware', () => {
  it('runs the same chain as the worker', async () => {
    const trail: string[] = [];
    await t.skiplock.enqueue('a', { n: 1 });
    const result = await drain(
      t.skiplock,
      {
        a: async () => {
          trail.push('handler');
        },
      },
      {
        middleware: [
          async (job, _context, next) => {
            trail.push(`mw ${job.kind}`);
            return next();
          },
        ],
      },
    );
    expect(result.succeeded).toBe(1);
    expect(trail).toEqual(['mw a', 'handler']);
  });
});
