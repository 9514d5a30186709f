/**
 * The pause safety net on a fake clock: a buffered job that waited long
 * starts only after a fresh read of its queue's paused state, and a database
 * slower than the freshness bound still lets jobs start (a read is fresh for
 * one and a half of its own round trips).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob } from '../../src/db/queries/claim.js';
import { Cancellation, PAUSE_RECHECK_MS } from '../../src/worker/cancellation.js';
import { bufferedExecution, Executions } from '../../src/worker/executions.js';
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
