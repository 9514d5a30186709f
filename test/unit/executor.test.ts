/**
 * The executor of one attempt, without a database: it never rejects, whatever
 * a handler or middleware does; a copy of the context keeps its signal; a
 * settled attempt's timeout does not fire; `next` runs the rest once.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { truncated } from '../../src/job/failure.js';
import type { Job } from '../../src/job/job.js';
import { AttemptControl, type Middleware, runJob, withMiddleware } from '../../src/worker/executor.js';
import type { Handler, ResolvedHandler } from '../../src/worker/handler-definition.js';
import { logLine } from '../../src/workflow/job-output.js';
import { sampleJob } from '../support/sample-job.js';

const job: Job = sampleJob();

afterEach(() => {
  vi.useRealTimers();
});

function chained(handle: Handler<string, unknown>, middleware: Middleware[]): Handler<string, unknown> {
  const handlers = new Map<string, ResolvedHandler>([['k', { transactional: false, handle }]]);
  return withMiddleware(handlers, middleware).get('k')!.handle as Handler<string, unknown>;
}

describe('runJob', () => {
  it('a thenable whose then() throws fails the attempt; it does not reject', async () => {
    const thenable = {
      // biome-ignore lint/suspicious/noThenProperty: the hostile thenable under test.
      then() {
        throw new Error('then exploded');
      },
    };
    const outcome = await runJob(() => thenable, job, new AttemptControl(), 1_000);
    expect(outcome).toMatchObject({ ok: false, error: expect.stringContaining('then exploded') });
  });

  it('a thenable that settles at once leaves no timeout armed: the signal is never aborted', async () => {
    vi.useFakeTimers();
    const control = new AttemptControl();
    const thenable = {
      // biome-ignore lint/suspicious/noThenProperty: a synchronous thenable under test.
      then(resolve: (v: unknown) => void) {
        resolve(1);
      },
    };
    const outcome = await runJob(() => thenable, job, control, 50);
    expect(outcome).toEqual({ ok: true, value: 1 });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(control.aborted).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a copy of the context keeps the signal, aborted by a timeout like the original', async () => {
    const signals: (AbortSignal | undefined)[] = [];
    const outcome = await runJob(
      (_job, context) => {
        const copy = { ...context, logger: 'mine' };
        signals.push(copy.signal);
        return new Promise((resolve) => copy.signal.addEventListener('abort', resolve));
      },
      job,
      new AttemptControl(),
      20,
    );
    expect(signals[0]).toBeInstanceOf(AbortSignal);
    expect(signals[0]!.aborted).toBe(true);
    expect(outcome).toMatchObject({ ok: false, error: expect.stringMatching(/timed out|timeout/i) });
  });
});

describe('withMiddleware', () => {
  it('runs the rest of the chain once: a second next() rejects, the handler ran once', async () => {
    let runs = 0;
    const twice: Middleware = async (_job, _context, next) => {
      await next();
      return next();
    };
    const outcome = await runJob(
      chained(async () => {
        runs++;
      }, [twice]),
      job,
      new AttemptControl(),
      undefined,
    );
    expect(runs).toBe(1);
    expect(outcome).toMatchObject({ ok: false, error: expect.stringContaining('next() was called twice') });
  });

  it('a middleware that does not wait for next() decides the outcome; the handler’s rejection crashes nothing', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const careless: Middleware = (_job, _context, next) => {
        void next();
        return 'done';
      };
      const outcome = await runJob(
        chained(async () => {
          throw new Error('handler failed');
        }, [careless]),
        job,
        new AttemptControl(),
        undefined,
      );
      expect(outcome).toEqual({ ok: true, value: 'done' });
      // Node reports an unhandled rejection after the microtasks of the turn it happened in.
      for (let turn = 0; turn < 3; turn++) await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('errors from another copy of the library', () => {
  // A handlers file loaded through a TypeScript loader can bring its own copy
  // of skiplock's modules: its errors fail `instanceof` here.
  it('a PermanentError and a subclass of it still end the job without retry', async () => {
    const secondCopy = '../../src/errors.ts?second-copy';
    const copy = (await import(/* @vite-ignore */ secondCopy)) as typeof import('../../src/errors.js');
    const { isPermanentError, PermanentError } = await import('../../src/errors.js');
    expect(copy.PermanentError).not.toBe(PermanentError);
    class OrderMissing extends copy.PermanentError {}
    for (const error of [
      new copy.PermanentError('gone'),
      new OrderMissing('gone'),
      new (class extends copy.PermanentError {})('gone'),
    ]) {
      expect(error).not.toBeInstanceOf(PermanentError);
      expect(error.name).toBe('PermanentError');
      expect(isPermanentError(error)).toBe(true);
      const outcome = await runJob(() => Promise.reject(error), job, new AttemptControl(), undefined);
      expect(outcome).toMatchObject({
        ok: false,
        permanent: true,
        error: expect.stringMatching(/^PermanentError: gone\n/),
      });
    }
  });
});

describe('texts cut to a length (last_error, attempt errors, log lines)', () => {
  it('never splits a surrogate pair, and leaves a text that fits as it is', () => {
    const emoji = '😀';
    expect(truncated(`a${emoji.repeat(3)}`, 7)).toBe(`a${emoji.repeat(3)}`);
    // 'a' and two pairs are 5 units: a cut at 4 would split the second pair, so it ends after the first.
    expect(truncated(`a${emoji.repeat(3)}`, 4)).toBe(`a${emoji}… [truncated]`);
    expect(truncated(`a${emoji.repeat(3)}`, 5)).toBe(`a${emoji.repeat(2)}… [truncated]`);
    expect(truncated('abcdef', 3)).toBe('abc… [truncated]');
    const line = logLine(`a${emoji.repeat(600)}`);
    expect(line.isWellFormed()).toBe(true);
    expect(line.endsWith(`${emoji}… [truncated]`)).toBe(true);
  });
});
