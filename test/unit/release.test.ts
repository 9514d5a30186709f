/**
 * Giving jobs back on a fake clock: the release statement is injected (it is
 * tested on PostgreSQL); these test the retries with backoff and the deadline
 * that bounds them, even while a statement does not answer.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob } from '../../src/db/queries/claim.js';
import { leaseKey } from '../../src/db/queries/job-row.js';
import { bufferedExecution } from '../../src/worker/executions.js';
import { releaseJobs } from '../../src/worker/release.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

function claimed(id: string): ClaimedJob {
  return {
    id,
    kind: 'k',
    queue: 'q',
    payload: {},
    priority: 0,
    runAt: new Date(0),
    attempts: 1,
    maxAttempts: 20,
    createdAt: new Date(0),
    leaseSeq: '1',
  };
}

beforeEach(() => {
  // No jitter: each pause is its full backoff (100 ms, 200 ms, 400 ms…).
  vi.spyOn(Math, 'random').mockReturnValue(1);
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** Releases two jobs within `deadlineMs`; `answer(n)` is the n-th statement's outcome. */
function release(
  clock: FakeClock,
  deadlineMs: number,
  answer: (n: number) => Promise<Map<string, 'queued'>>,
) {
  const jobs = [bufferedExecution(claimed('1'), 0), bufferedExecution(claimed('2'), 0)];
  const sentAt: number[] = [];
  const released: string[] = [];
  const errors: string[] = [];
  let done = false;
  const startedAt = clock.monotonic();
  const releasing = releaseJobs({
    jobs,
    release: () => {
      sentAt.push(clock.monotonic() - startedAt);
      return answer(sentAt.length);
    },
    deadlineMs,
    onReleased: (e, status) => released.push(`${e.id}:${status}`),
    onError: (error) => errors.push(error.message),
    clock,
  }).then(() => {
    done = true;
  });
  return { jobs, sentAt, released, errors, releasing, isDone: () => done };
}

describe('releaseJobs', () => {
  it('retries a failed release with backoff and reports the jobs the statement released', async () => {
    const clock = fakeClock();
    const r = release(clock, 10_000, async (n) => {
      if (n < 3) throw new Error('connection lost');
      return new Map([[leaseKey({ id: '1', leaseSeq: '1' }), 'queued' as const]]);
    });
    await clock.tick(99);
    expect(r.sentAt).toEqual([0]);
    await clock.tick(1);
    expect(r.sentAt).toEqual([0, 100]);
    await clock.tick(200);
    expect(r.sentAt).toEqual([0, 100, 300]);
    await r.releasing;
    expect(r.errors).toEqual(['connection lost', 'connection lost']);
    expect(r.released).toEqual(['1:queued']);
    expect(clock.pending()).toBe(0);
  });

  it('gives up at the deadline while a statement does not answer, and reports nothing', async () => {
    const clock = fakeClock();
    const r = release(clock, 5_000, () => new Promise(() => {}));
    await clock.tick(4_999);
    expect(r.isDone()).toBe(false);
    await clock.tick(1);
    expect(r.isDone()).toBe(true);
    expect(r.sentAt).toEqual([0]);
    expect(r.released).toEqual([]);
    expect(clock.pending()).toBe(0);
  });

  it('does not start a pause that would end past the deadline', async () => {
    const clock = fakeClock();
    // Tries at 0, 100, 300 and 700; the next pause (800 ms) would end at 1500, past the deadline.
    const r = release(clock, 1_200, async () => {
      throw new Error('connection lost');
    });
    await clock.tick(700);
    await r.releasing;
    expect(r.sentAt).toEqual([0, 100, 300, 700]);
    expect(r.errors).toHaveLength(4);
    expect(clock.pending()).toBe(0);
  });
});
