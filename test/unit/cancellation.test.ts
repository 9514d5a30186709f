/**
 * The pause safety net on a fake clock: a buffered job that waited long
 * starts only after a fresh read of its queue's paused state, and a database
 * slower than the freshness bound still lets jobs start (a read is fresh for
 * one and a half of its own round trips). On an injected fake clock: cancel
 * messages lead to coalesced reads, at most one in flight and one every
 * CONTROL_READ_INTERVAL_MS, and a failed read is retried with backoff.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob } from '../../src/db/queries/claim.js';
import { Cancellation, PAUSE_RECHECK_MS } from '../../src/worker/cancellation.js';
import { CONTROL_READ_INTERVAL_MS } from '../../src/worker/coalesced.js';
import { bufferedExecution, Executions } from '../../src/worker/executions.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';
import { sampleJob } from '../support/sample-job.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function claimed(id: string): ClaimedJob {
  return { ...sampleJob({ id, queue: 'q' }), leaseSeq: '1' };
}

/** A Cancellation whose paused-state reads take `readMs` each (none paused). */
function withSlowReads(readMs: number) {
  const executions = new Executions();
  let reads = 0;
  let checked = 0;
  const cancellation = new Cancellation({
    executions,
    queues: ['q'],
    giveBack: () => {},
    cancelRequested: async () => new Set(),
    paused: () => {
      reads++;
      return new Promise((resolve) => setTimeout(() => resolve(new Set()), readMs));
    },
    onChecked: () => {
      checked++;
    },
    onError: (error) => {
      throw error;
    },
  });
  return { executions, cancellation, reads: () => reads, checked: () => checked };
}

describe('the pause safety net', () => {
  it('a job that waited past the bound starts after one read, not before', async () => {
    const { executions, cancellation, reads, checked } = withSlowReads(5);
    const e = bufferedExecution(claimed('1'), performance.now());
    executions.buffer([e]);
    await vi.advanceTimersByTimeAsync(PAUSE_RECHECK_MS + 1);
    expect(cancellation.mayStart(e, performance.now())).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect([reads(), checked()]).toEqual([1, 1]);
    expect(cancellation.mayStart(e, performance.now())).toBe(true);
    await cancellation.stop();
  });

  it('a database that answers in 1.3 s still lets buffered jobs start, after one read', async () => {
    const { executions, cancellation, reads, checked } = withSlowReads(1_300);
    // The claim took 1.3 s too: the job is past the bound when it arrives.
    const e = bufferedExecution(claimed('1'), performance.now());
    executions.buffer([e]);
    await vi.advanceTimersByTimeAsync(1_300);
    expect(cancellation.mayStart(e, performance.now())).toBe(false);
    await vi.advanceTimersByTimeAsync(1_350);
    expect([reads(), checked()]).toEqual([1, 1]);
    expect(cancellation.mayStart(e, performance.now())).toBe(true);
    expect(reads()).toBe(1);
    await cancellation.stop();
  });
});

describe('coalesced reads on an injected clock', () => {
  /**
   * A Cancellation on `clock` holding jobs 1–3 buffered; its cancel reads
   * answer after `readMs` that every job read was cancelled, or fail while
   * `fails()`.
   */
  function onClock(clock: FakeClock, readMs: number, fails: () => boolean = () => false) {
    const executions = new Executions(clock);
    executions.buffer(['1', '2', '3'].map((id) => bufferedExecution(claimed(id), clock.monotonic())));
    const reads: { at: number; ids: string[] }[] = [];
    const givenBack: string[] = [];
    const errors: string[] = [];
    const cancellation = new Cancellation(
      {
        executions,
        queues: ['q'],
        giveBack: (taken) => givenBack.push(...taken.map((e) => e.id)),
        cancelRequested: (held) => {
          reads.push({ at: clock.monotonic(), ids: held.map((e) => e.id) });
          return new Promise((resolve, reject) =>
            clock.setTimeout(() => {
              if (fails()) reject(new Error('connection lost'));
              else resolve(new Set(held.map((e) => `${e.id}#${e.leaseSeq}`)));
            }, readMs),
          );
        },
        paused: async () => new Set(),
        onChecked: () => {},
        onError: (error) => errors.push(error.message),
      },
      clock,
    );
    return { cancellation, reads, givenBack, errors };
  }
  const cancel = (...ids: string[]) => ({ type: 'cancel' as const, queue: 'q', delayMs: 0, ids });

  it('a flood of cancel messages costs one read in flight and one after it, at least 50 ms apart', async () => {
    const clock = fakeClock();
    const t0 = clock.monotonic();
    const { cancellation, reads, givenBack } = onClock(clock, 10);
    expect(cancellation.onMessage(cancel('1'))).toBe(true);
    await clock.tick(0);
    for (let i = 0; i < 100; i++) cancellation.onMessage(cancel('2'));
    cancellation.onMessage(cancel('99'));
    await clock.tick(5);
    // One read in flight; the flood waits for it.
    expect(reads).toEqual([{ at: t0, ids: ['1'] }]);
    await clock.tick(CONTROL_READ_INTERVAL_MS - 6);
    expect(reads).toHaveLength(1);
    await clock.tick(1);
    // Every message of the flood in one read; job 99 is not held, so never read.
    expect(reads).toEqual([
      { at: t0, ids: ['1'] },
      { at: t0 + CONTROL_READ_INTERVAL_MS, ids: ['2'] },
    ]);
    await clock.tick(1_000);
    expect(reads).toHaveLength(2);
    expect(givenBack).toEqual(['1', '2']);
    await cancellation.stop();
    expect(clock.pending()).toBe(0);
  });

  it('a failed read is retried on the clock, with backoff, and stop() cancels the retry', async () => {
    const clock = fakeClock();
    let fail = true;
    const { cancellation, reads, givenBack, errors } = onClock(clock, 10, () => fail);
    cancellation.onMessage(cancel('3'));
    await clock.tick(10);
    expect([reads.length, errors.length]).toEqual([1, 1]);
    // The first retry comes after 50–100 ms of backoff (and the 50 ms interval).
    await clock.tick(49);
    expect(reads).toHaveLength(1);
    await clock.tick(51);
    expect(reads).toHaveLength(2);
    fail = false;
    await clock.tick(5_000);
    expect(reads.at(-1)?.ids).toEqual(['3']);
    expect(givenBack).toEqual(['3']);
    const readsSoFar = reads.length;
    fail = true;
    cancellation.onMessage(cancel('1'));
    await clock.tick(10);
    await cancellation.stop();
    await clock.tick(10_000);
    expect(reads).toHaveLength(readsSoFar + 1);
    expect(clock.pending()).toBe(0);
  });
});
