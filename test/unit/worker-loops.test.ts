/**
 * The worker's loops in isolation, with their dependencies injected and the
 * clock faked: when the fetcher claims, how the completer batches and leaves no
 * timer behind, and what the heartbeat reports. No database: these test the
 * loops' timing rules; the statements they call are tested on PostgreSQL.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob } from '../../src/db/queries/claim.js';
import type { FinishedJob, FinishingJob, FinishOutcome } from '../../src/db/queries/finish.js';
import { type LeasedJob, leaseKey } from '../../src/db/queries/job-row.js';
import type { LeaseState } from '../../src/db/queries/results.js';
import { DatabaseError } from '../../src/errors.js';
import type { JobStatus } from '../../src/job/job.js';
import { Coalesced } from '../../src/worker/coalesced.js';
import { Completer } from '../../src/worker/completer.js';
import { Fetcher } from '../../src/worker/fetcher.js';
import { Heartbeat } from '../../src/worker/heartbeat.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

function job(id: number): ClaimedJob {
  return {
    id: String(id),
    kind: 'k',
    queue: 'q',
    payload: {},
    priority: 0,
    runAt: new Date(0),
    attempts: 1,
    maxAttempts: 3,
    createdAt: new Date(0),
    leaseSeq: '1',
  };
}

/** Lets pending promise callbacks and immediates run (immediates stay real). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await vi.advanceTimersByTimeAsync(0);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('Fetcher', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A fetcher over a fake table; its worker holds at most 10 jobs, freed by `free(n)`. */
  function fetcher(available: number[]) {
    const claims: number[] = [];
    const dispatched: string[][] = [];
    let queue = [...available];
    let held = 0;
    const f = new Fetcher({
      pollIntervalMs: 1000,
      claimLimit: () => 10 - held,
      claim: async (n) => {
        claims.push(n);
        const taken = queue.slice(0, n);
        queue = queue.slice(n);
        return taken.map(job);
      },
      dispatch: (jobs) => {
        held += jobs.length;
        dispatched.push(jobs.map((j) => j.id));
      },
      onError: () => {},
    });
    return {
      f,
      claims,
      dispatched,
      add: (...ids: number[]) => {
        queue.push(...ids);
      },
      free: (n: number) => {
        held -= n;
        f.slotFreed();
      },
    };
  }

  it('claims once at start, then not again until woken, polled or due', async () => {
    const { f, claims, add } = fetcher([1, 2]);
    f.start();
    await settle();
    expect(claims).toEqual([10]);
    add(3);
    await vi.advanceTimersByTimeAsync(990);
    await settle();
    expect(claims).toEqual([10]);
    await vi.advanceTimersByTimeAsync(10);
    await settle();
    expect(claims).toEqual([10, 8]);
    await f.stop();
  });

  it('a full batch claims again as soon as a slot frees; a partial one waits', async () => {
    const { f, claims, dispatched, free } = fetcher(Array.from({ length: 25 }, (_, i) => i + 1));
    f.start();
    await settle();
    expect(claims).toEqual([10]);
    expect(f.backlog).toBe(true);
    free(4);
    await settle();
    expect(claims).toEqual([10, 4]);
    free(10);
    await settle();
    expect(claims).toEqual([10, 4, 10]);
    expect(dispatched.map((d) => d.length)).toEqual([10, 4, 10]);
    free(10);
    await settle();
    expect(dispatched.map((d) => d.length)).toEqual([10, 4, 10, 1]);
    expect(f.backlog).toBe(false);
    free(1);
    await settle();
    expect(claims).toHaveLength(4);
    await f.stop();
  });

  it('wakeAfter arms a timer for each due time, earliest first', async () => {
    const { f, claims } = fetcher([]);
    f.start();
    await settle();
    expect(claims).toHaveLength(1);
    f.wakeAfter(500);
    f.wakeAfter(200);
    await vi.advanceTimersByTimeAsync(199);
    expect(claims).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(claims).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(300);
    await settle();
    expect(claims).toHaveLength(3);
    await f.stop();
  });

  it('due times that come due together, a retry’s and a message’s, wake once and leave the loop running', async () => {
    const { f, claims } = fetcher([]);
    f.start();
    await settle();
    // A retry (not a hint) due in 200 ms, and a hinted time 10 ms after it (a wake-up of its own).
    f.wakeAfter(200);
    f.hint(210);
    f.wakeAfter(900);
    // The timer fires late, as on a busy machine: both times are due when it runs.
    vi.setSystemTime(Date.now() + 30);
    await vi.advanceTimersByTimeAsync(200);
    await settle();
    expect(claims).toHaveLength(2);
    // The timer took every due time off and armed the next: the 900 ms one still wakes.
    await vi.advanceTimersByTimeAsync(700);
    await settle();
    expect(claims).toHaveLength(3);
    await f.stop();
  });

  it('hints: a burst costs one claim; hinted claims that find nothing make the next wait 25, 50, then 100 ms', async () => {
    const { f, claims, add } = fetcher([]);
    f.start();
    await settle();
    expect(claims).toHaveLength(1);
    for (let i = 0; i < 1000; i++) f.hint();
    await settle();
    expect(claims).toHaveLength(2);
    // That one found nothing: hints wait 25 ms, together.
    for (let i = 0; i < 1000; i++) f.hint();
    await vi.advanceTimersByTimeAsync(24);
    await settle();
    expect(claims).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(claims).toHaveLength(3);
    f.hint();
    await vi.advanceTimersByTimeAsync(49);
    await settle();
    expect(claims).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(claims).toHaveLength(4);
    f.hint();
    await vi.advanceTimersByTimeAsync(99);
    await settle();
    expect(claims).toHaveLength(4);
    await vi.advanceTimersByTimeAsync(1);
    await settle();
    expect(claims).toHaveLength(5);
    // A trusted wake (the poll, a reconnection, a freed slot) does not wait.
    f.hint();
    await vi.advanceTimersByTimeAsync(10);
    await settle();
    expect(claims).toHaveLength(5);
    f.wake();
    await settle();
    expect(claims).toHaveLength(6);
    // A hinted claim that finds a job ends the waits: the next hint claims at once.
    add(1);
    f.hint();
    await vi.advanceTimersByTimeAsync(100);
    await settle();
    expect(claims).toHaveLength(7);
    add(2);
    f.hint();
    await settle();
    expect(claims).toHaveLength(8);
    // Announced due times wait the same way: 50 of them over half a second cost a few claims.
    for (let i = 1; i <= 50; i++) f.hint(i * 10);
    await vi.advanceTimersByTimeAsync(600);
    await settle();
    expect(claims.length - 8).toBeLessThanOrEqual(8);
    await f.stop();
  });

  it('does not claim while the limit is 0, and claims when a slot frees', async () => {
    let limit = 0;
    const claims: number[] = [];
    const f = new Fetcher({
      pollIntervalMs: 1000,
      claimLimit: () => limit,
      claim: async (n) => {
        claims.push(n);
        return [];
      },
      dispatch: () => {},
      onError: () => {},
    });
    f.start();
    await settle();
    expect(claims).toEqual([]);
    limit = 3;
    f.slotFreed();
    await settle();
    expect(claims).toEqual([3]);
    await f.stop();
  });
});

describe('Completer', () => {
  const lease = (id: number, leaseSeq = '1'): LeasedJob => ({ id: String(id), attempts: 1, leaseSeq });
  const state = (id: number, status: JobStatus, lockedBy: string | null = null): LeaseState => ({
    id: String(id),
    leaseSeq: '1',
    status,
    lockedBy,
    queue: 'q',
    retryDelayMs: 0,
  });
  const wrote = (job: FinishingJob, outcome: FinishOutcome, retryDelayMs = 0): [string, FinishedJob] => [
    leaseKey(job),
    { id: job.id, leaseSeq: job.leaseSeq, outcome, queue: 'q', retryDelayMs },
  ];

  /** Lets promise callbacks and the completer's batching turn (an immediate, left real) run. */
  async function turn(clock: FakeClock): Promise<void> {
    for (let i = 0; i < 5; i++) {
      await clock.tick(0);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** A completer whose writes `finish` answers; records the batches and what was reported. */
  function completer(
    finish: (jobs: FinishingJob[], call: number) => Promise<Map<string, FinishedJob>>,
    states: (ids: string[]) => LeaseState[] = () => [],
  ) {
    const clock = fakeClock();
    const batches: FinishingJob[][] = [];
    const reads: string[][] = [];
    const reported: string[] = [];
    const c = new Completer<LeasedJob>(
      {
        finish: (jobs) => {
          batches.push(jobs);
          return finish(jobs, batches.length);
        },
        leaseStates: async (ids) => {
          reads.push(ids);
          return states(ids);
        },
        workerId: 'w',
        successLeavesRow: false,
        onSuccess: (j) => reported.push(`${j.id} success`),
        onFailure: (f, o) => reported.push(`${f.job.id} ${o.status} ${o.retryDelayMs}`),
        onCancelled: (j) => reported.push(`${j.id} cancelled`),
        onStale: (j) => reported.push(`${j.id} stale`),
        onError: (e) => reported.push(`error ${e.message}`),
      },
      clock,
    );
    c.start();
    return { c, clock, batches, reads, reported };
  }

  it('writes the successes and failures of one turn in one statement and reports each', async () => {
    const { c, clock, batches, reported } = completer(async (jobs) => {
      const outcomes: FinishOutcome[] = ['succeeded', 'retry', 'snoozed', 'dead', 'cancelled'];
      return new Map(jobs.map((j, i) => wrote(j, outcomes[i]!, i === 1 ? 1500 : i === 2 ? 60_000 : 0)));
    });
    c.succeeded(lease(1));
    c.failed({ job: lease(2), thrown: 'x', error: 'x', permanent: false, retryDelayMs: 1500 });
    c.failed({ job: lease(3), thrown: 's', error: 's', permanent: false, snoozeDelayMs: 60_000 });
    c.failed({ job: lease(4), thrown: 'y', error: 'y', permanent: false });
    c.succeeded(lease(5));
    await turn(clock);
    expect(batches).toEqual([
      [
        { ...lease(1), outcome: 'succeeded' },
        { ...lease(2), outcome: 'failed', error: 'x', permanent: false, retryDelayMs: 1500 },
        { ...lease(3), outcome: 'snoozed', delayMs: 60_000 },
        { ...lease(4), outcome: 'failed', error: 'y', permanent: false, retryDelayMs: undefined },
        { ...lease(5), outcome: 'succeeded' },
      ],
    ]);
    expect(reported).toEqual(['1 success', '2 queued 1500', '3 queued 60000', '4 dead 0', '5 cancelled']);
    expect(c.backlog).toBe(0);
    await c.drain(1000);
    expect(clock.pending()).toBe(0);
  });

  it('after a lost answer waits its backoff on the clock, reads where the jobs stand, and writes only those still held', async () => {
    const { c, clock, batches, reads, reported } = completer(
      async (jobs, call) => {
        if (call === 1) throw new DatabaseError('connection lost', '08006');
        return new Map(jobs.map((j) => wrote(j, 'succeeded')));
      },
      () => [state(2, 'running', 'w'), state(3, 'failed'), { ...state(4, 'queued'), leaseSeq: '2' }],
    );
    c.succeeded(lease(1)); // gone: its delete committed before the answer was lost
    c.succeeded(lease(2)); // still held: written again
    c.failed({ job: lease(3), thrown: 'x', error: 'x', permanent: true }); // its failure committed
    c.succeeded(lease(4)); // claimed again since: stale
    await turn(clock);
    expect(batches).toHaveLength(1);
    expect(reads).toEqual([]);
    // The first retry waits 50–100 ms.
    await clock.tick(49);
    await turn(clock);
    expect(reads).toEqual([]);
    await clock.tick(51);
    await turn(clock);
    expect(reads).toEqual([['1', '2', '3', '4']]);
    expect(batches.map((b) => b.map((j) => j.id))).toEqual([['1', '2', '3', '4'], ['2']]);
    expect(reported).toEqual(['error connection lost', '1 success', '3 failed 0', '4 stale', '2 success']);
    await c.drain(1000);
    expect(clock.pending()).toBe(0);
  });

  it('writes again a job the write left alone while its lease is held (a cancel requested meanwhile); one that is gone is stale', async () => {
    const { c, clock, batches, reads, reported } = completer(
      async (jobs, call) => new Map(call === 1 ? [] : jobs.map((j) => wrote(j, 'cancelled'))),
      () => [state(1, 'running', 'w'), state(2, 'queued')],
    );
    c.succeeded(lease(1));
    c.failed({ job: lease(2), thrown: 'x', error: 'x', permanent: false });
    await turn(clock);
    expect(batches.map((b) => b.map((j) => j.id))).toEqual([['1', '2'], ['1']]);
    expect(reads).toEqual([['1', '2']]);
    // The sweeper requeued job 2: not this write's doing, so stale.
    expect(reported).toEqual(['2 stale', '1 cancelled']);
    await c.drain(1000);
  });

  it('stops writing again a job the write keeps leaving alone: it is stale', async () => {
    const { c, clock, batches, reported } = completer(
      async () => new Map(),
      () => [state(1, 'running', 'w')],
    );
    c.succeeded(lease(1));
    await turn(clock);
    expect(batches).toHaveLength(4);
    expect(reported).toEqual(['1 stale']);
    await c.drain(1000);
  });

  it('drain() is bounded: a write that never answers is abandoned at the deadline, and no timer is left', async () => {
    const { c, clock, batches } = completer(() => new Promise(() => {}));
    c.succeeded(lease(1));
    await turn(clock);
    expect(batches).toHaveLength(1);
    let drained = false;
    const draining = c.drain(5_000).then(() => {
      drained = true;
    });
    await clock.tick(4_999);
    expect(drained).toBe(false);
    await clock.tick(1);
    await draining;
    expect(drained).toBe(true);
    expect(clock.pending()).toBe(0);
  });

  it('drain() past its deadline stops retrying a failing write', async () => {
    const { c, clock, batches } = completer(
      async () => {
        throw new DatabaseError('connection lost', '08006');
      },
      () => [state(1, 'running', 'w')],
    );
    c.succeeded(lease(1));
    await turn(clock);
    const draining = c.drain(2_000);
    await clock.tick(2_000);
    await draining;
    const tries = batches.length;
    expect(tries).toBeGreaterThan(1);
    await clock.tick(60_000);
    await turn(clock);
    expect(batches).toHaveLength(tries);
    expect(c.state).toBe('stopped');
    expect(clock.pending()).toBe(0);
  });
});

describe('Heartbeat', () => {
  it('beats every interval with the held jobs and reports the leases it no longer holds', async () => {
    const clock = fakeClock();
    const held: LeasedJob[] = [
      { id: '1', attempts: 1, leaseSeq: '1' },
      { id: '2', attempts: 1, leaseSeq: '1' },
    ];
    const beats: string[][] = [];
    const lost: string[] = [];
    const h = new Heartbeat<LeasedJob>(
      {
        intervalMs: 100,
        leased: () => held,
        beat: async (jobs) => {
          beats.push(jobs.map((j) => j.id));
          return { held: new Set([leaseKey(held[0] as LeasedJob)]), cancelRequested: new Set<string>() };
        },
        onLost: (j) => lost.push(j.id),
        onCancelRequested: () => {},
        onError: () => {},
      },
      clock,
    );
    h.start();
    await clock.tick(99);
    expect(beats).toEqual([]);
    await clock.tick(1);
    expect(beats).toEqual([['1', '2']]);
    expect(lost).toEqual(['2']);
    await clock.tick(100);
    expect(beats).toHaveLength(2);
    await h.stop();
    expect(h.state).toBe('stopped');
    expect(clock.pending()).toBe(0);
    await clock.tick(500);
    expect(beats).toHaveLength(2);
  });

  it('waits for a beat in flight when stopped, and beats no more', async () => {
    const clock = fakeClock();
    let finish: (() => void) | undefined;
    let beats = 0;
    const h = new Heartbeat<LeasedJob>(
      {
        intervalMs: 100,
        leased: () => [{ id: '1', attempts: 1, leaseSeq: '1' }],
        beat: () => {
          beats++;
          return new Promise((resolve) => {
            finish = () => resolve({ held: new Set<string>(), cancelRequested: new Set<string>() });
          });
        },
        onLost: () => {},
        onCancelRequested: () => {},
        onError: () => {},
      },
      clock,
    );
    h.start();
    await clock.tick(100);
    expect(beats).toBe(1);
    let stopped = false;
    const stopping = h.stop().then(() => {
      stopped = true;
    });
    await clock.tick(0);
    expect(stopped).toBe(false);
    finish?.();
    await stopping;
    await clock.tick(1000);
    expect(beats).toBe(1);
  });
});

describe('Coalesced', () => {
  it('runs once more for any number of requests during a run, and loses no request made as a run ends', async () => {
    vi.useRealTimers();
    let runs = 0;
    let finish!: () => void;
    const c = new Coalesced(async () => {
      runs++;
      await new Promise<void>((resolve) => {
        finish = resolve;
      });
    });
    c.request();
    expect(runs).toBe(1);
    for (let i = 0; i < 1000; i++) c.request();
    finish();
    await new Promise((resolve) => setImmediate(resolve));
    expect(runs).toBe(2);
    // A request from a promise callback that settles right after the run: a third run.
    const ended = Promise.resolve().then(() => c.request());
    finish();
    await ended;
    await new Promise((resolve) => setImmediate(resolve));
    expect(runs).toBe(3);
    finish();
    await c.stop();
    c.request();
    expect(runs).toBe(3);
  });

  it('starts runs at least minIntervalMs apart', async () => {
    vi.useRealTimers();
    const starts: number[] = [];
    const c = new Coalesced(async () => {
      starts.push(performance.now());
    }, 50);
    c.request();
    await new Promise((resolve) => setImmediate(resolve));
    c.request();
    c.request();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(starts).toHaveLength(2);
    expect(starts[1]! - starts[0]!).toBeGreaterThanOrEqual(49);
    await c.stop();
  });
});
