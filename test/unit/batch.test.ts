/**
 * Batch handlers without a database: gathering on a fake clock (a batch runs
 * when full or when its wait ends, late arrivals join it), and runBatch's
 * outcomes (one per job; a throw, a timeout or a wrong result fails them all;
 * middleware once around the batch).
 */
import { describe, expect, it } from 'vitest';
import { JobTimeoutError, PermanentError, SkiplockError, SnoozeError } from '../../src/errors.js';
import type { Job } from '../../src/job/job.js';
import { BatchGathering } from '../../src/worker/batch-gathering.js';
import {
  AttemptControl,
  type Middleware,
  type RunOutcome,
  runBatch,
  withMiddleware,
} from '../../src/worker/executor.js';
import { type BatchContext, resolveHandlers } from '../../src/worker/handler-definition.js';
import { fakeClock } from '../support/fake-clock.js';
import { sampleJob } from '../support/sample-job.js';

function gathering() {
  const clock = fakeClock();
  const launched: { kind: string; items: number[]; atMs: number }[] = [];
  const startMs = clock.monotonic();
  const batches = new BatchGathering<number>(clock, (kind, items) =>
    launched.push({ kind, items: [...items], atMs: clock.monotonic() - startMs }),
  );
  return { clock, launched, batches };
}

describe('BatchGathering', () => {
  it('waits maxWaitMs for late arrivals, then runs with what it has', async () => {
    const { clock, launched, batches } = gathering();
    batches.open('mail', [1], 10, 200, new AttemptControl());
    expect(batches.room('mail')).toBe(9);
    await clock.tick(120);
    batches.add('mail', [2, 3]);
    await clock.tick(79);
    expect(launched).toEqual([]);
    await clock.tick(1);
    expect(launched).toEqual([{ kind: 'mail', items: [1, 2, 3], atMs: 200 }]);
    expect(batches.size).toBe(0);
    expect(clock.pending()).toBe(0);
  });

  it('runs a batch as soon as it is full, without waiting', async () => {
    const { clock, launched, batches } = gathering();
    batches.open('mail', [1, 2], 3, 5_000, new AttemptControl());
    await clock.tick(10);
    batches.add('mail', [3]);
    expect(launched).toEqual([{ kind: 'mail', items: [1, 2, 3], atMs: 10 }]);
    expect(batches.room('mail')).toBe(0);
    expect(clock.pending()).toBe(0);
  });

  it('runs at once with maxWaitMs 0, or when opened full', () => {
    const { launched, batches } = gathering();
    batches.open('a', [1], 10, 0, new AttemptControl());
    batches.open('b', [1, 2], 2, 1_000, new AttemptControl());
    expect(launched.map((l) => l.kind)).toEqual(['a', 'b']);
    expect(batches.size).toBe(0);
  });

  it('flush runs every open batch now (a stop)', async () => {
    const { clock, launched, batches } = gathering();
    batches.open('a', [1], 10, 1_000, new AttemptControl());
    batches.open('b', [2], 10, 1_000, new AttemptControl());
    await clock.tick(5);
    batches.flush();
    expect(launched).toEqual([
      { kind: 'a', items: [1], atMs: 5 },
      { kind: 'b', items: [2], atMs: 5 },
    ]);
    expect(clock.pending()).toBe(0);
  });
});

/** The message of what a failed outcome threw. */
const message = (o: RunOutcome) => (o.ok ? undefined : (o.thrown as Error).message);

describe('runBatch', () => {
  const jobs: Job[] = [sampleJob({ id: '1' }), sampleJob({ id: '2' }), sampleJob({ id: '3' })];
  const batchOf = (handleBatch: (jobs: Job[]) => unknown) => ({
    handleBatch,
    maxBatchSize: 10,
    maxWaitMs: 0,
  });

  it('gives each job its own outcome', async () => {
    const outcomes = await runBatch(
      batchOf(async () => ['value', new PermanentError('no'), new SnoozeError(5_000)]),
      jobs,
      new AttemptControl(),
      undefined,
    );
    // A value is the job's result, as a single handler's return value.
    expect(outcomes[0]).toEqual({ ok: true, value: 'value' });
    expect(outcomes[1]).toMatchObject({ ok: false, permanent: true, snoozeDelayMs: undefined });
    expect(outcomes[2]).toMatchObject({ ok: false, permanent: false, snoozeDelayMs: 5_000 });
  });

  it('fails every job alike when the batch throws, synchronously or not', async () => {
    for (const handleBatch of [
      () => {
        throw new Error('down');
      },
      async () => {
        throw new Error('down');
      },
    ]) {
      const outcomes = await runBatch(batchOf(handleBatch), jobs, new AttemptControl(), undefined);
      expect(outcomes.map(message)).toEqual(['down', 'down', 'down']);
    }
  });

  it('fails every job with a clear error when the result is not one outcome per job', async () => {
    const short = await runBatch(
      batchOf(() => [undefined]),
      jobs,
      new AttemptControl(),
      undefined,
    );
    expect(short.map(message)).toEqual(
      Array(3).fill('handleBatch must return one outcome per job: 3 jobs, 1 outcomes'),
    );
    const none = await runBatch(
      batchOf(async () => undefined),
      jobs,
      new AttemptControl(),
      undefined,
    );
    expect(none.map(message)).toEqual(
      Array(3).fill('handleBatch must return an array of 3 outcomes; it returned undefined'),
    );
  });

  it('fails every job with the timeout, and aborts the batch signal', async () => {
    const control = new AttemptControl();
    const outcomes = await runBatch(
      batchOf(() => new Promise(() => {})),
      jobs,
      control,
      20,
    );
    expect(outcomes.every((o) => !o.ok && o.thrown instanceof JobTimeoutError)).toBe(true);
    expect(control.signal.aborted).toBe(true);
  });

  it('rejects parents() with a SkiplockError (code USAGE) that says why, in the handler and its middleware', async () => {
    const seen: unknown[] = [];
    const middleware: Middleware = async (_job, context, next) => {
      seen.push(await context.parents().catch((error: unknown) => error));
      return next();
    };
    const handlers = withMiddleware(
      resolveHandlers(
        {
          k: {
            handleBatch: async (batch: Job[], context: BatchContext) => {
              const parents = (context as unknown as { parents(): Promise<unknown> }).parents();
              seen.push(await parents.catch((error: unknown) => error));
              return batch.map(() => undefined);
            },
          },
        },
        'handlers',
      ),
      [middleware],
    );
    const handler = handlers.get('k')!;
    const batch = handler.transactional ? undefined : handler.batch;
    expect(await runBatch(batch!, jobs, new AttemptControl(), undefined)).toEqual([
      { ok: true },
      { ok: true },
      { ok: true },
    ]);
    expect(seen).toHaveLength(2);
    for (const error of seen) {
      expect(error).toBeInstanceOf(SkiplockError);
      expect(error).toMatchObject({
        code: 'USAGE',
        message: expect.stringMatching(/^parents\(\) is not available in a batch handler .*single handler/),
      });
    }
  });

  it('runs middleware once around the batch, given its first job', async () => {
    const seen: string[] = [];
    const middleware: Middleware = async (job, _context, next) => {
      seen.push(job.id);
      return next();
    };
    const handlers = withMiddleware(
      resolveHandlers({ k: { handleBatch: async (batch: Job[]) => batch.map(() => undefined) } }, 'handlers'),
      [middleware],
    );
    const handler = handlers.get('k')!;
    const batch = handler.transactional ? undefined : handler.batch;
    const outcomes = await runBatch(batch!, jobs, new AttemptControl(), undefined);
    expect(outcomes).toEqual([{ ok: true }, { ok: true }, { ok: true }]);
    expect(seen).toEqual(['1']);
  });
});
