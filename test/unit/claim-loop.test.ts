/**
 * The claim loop's modes on a fake clock, over fake statements: when it
 * claims, how many jobs it asks for, how wake-ups coalesce and cool down, and
 * how it backs off and stops. No database: these test the loop's timing
 * rules; the statements it sends are tested on PostgreSQL. Also the coalesced
 * reads of control messages, on the same clock.
 */
import type pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ClaimedJob, ClaimRequest } from '../../src/db/queries/claim.js';
import type { LimitedClaim } from '../../src/db/queries/claim-limited.js';
import type { SkiplockError } from '../../src/errors.js';
import type { Clock } from '../../src/runtime/clock.js';
import {
  ClaimLoop,
  HINT_COOLDOWN_MAX_MS,
  HINT_COOLDOWN_MS,
  MAX_DUE_TIMES,
} from '../../src/worker/claim-loop.js';
import { Coalesced } from '../../src/worker/coalesced.js';
import { SIZE_CAP_RECOVERY_MS } from '../../src/worker/loop-backoff.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

function job(id: number, queue = 'q'): ClaimedJob {
  return {
    id: String(id),
    kind: 'k',
    queue,
    payload: {},
    priority: 0,
    runAt: new Date(0),
    attempts: 1,
    maxAttempts: 3,
    createdAt: new Date(0),
    leaseSeq: '1',
  };
}

/** The error of a statement the server cancelled on its `statement_timeout`, as pg raises it. */
function statementTimeout(): Error {
  return Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
}

/** Runs pending promise callbacks and immediates without moving the clock. */
async function settle(clock: FakeClock): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await clock.tick(0);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

interface Setup {
  available?: number[];
  concurrency?: number;
  prefetch?: number;
  batchSize?: number;
  /** Queues the limits read returns. */
  limited?: string[];
  /** Jobs of limited queues, by queue, and the room their limits leave per claim. */
  limitedJobs?: Map<string, number[]>;
  limitedRoom?: number;
  /**
   * Given: the limited queue is a grouped one without queue limits (no
   * concurrency room), whose claims take at most `limitedRoom` jobs and say
   * whether a key's limit held jobs back.
   */
  groupHeld?: boolean;
  /** Given: the limited queue's claims say it may be prefetched (its one limit is a group concurrency). */
  prefetchable?: boolean;
  /** A clock whose monotonic time runs `skew()` ahead of its timers (a late timer). */
  skew?: () => number;
  /** Claim statements asking for more jobs than this fail on the server's statement_timeout. */
  timeoutAbove?: number;
  /** The same for the limited queues' claim statements only. */
  limitedTimeoutAbove?: number;
}

/**
 * A claim loop over a fake table of `available` jobs, on a fake clock. Its
 * worker holds claimed jobs until `free(n)`; those beyond `concurrency` are
 * buffered. `hold()` makes the next claims wait until `release()`.
 */
function setup(s: Setup = {}) {
  const clock = fakeClock();
  const loopClock: Clock = s.skew ? { ...clock, monotonic: () => clock.monotonic() + s.skew!() } : clock;
  const concurrency = s.concurrency ?? 10;
  const claims: number[] = [];
  const requests: ClaimRequest[] = [];
  const dispatched: string[][] = [];
  const errors: SkiplockError[] = [];
  const limitReads: number[] = [];
  let table = [...(s.available ?? [])];
  let heldJobs = 0;
  let failures = 0;
  let gate: Promise<void> | undefined;
  let open: () => void = () => {};
  const statements = {
    claim: {
      claim: async (_pool: unknown, request: ClaimRequest): Promise<ClaimedJob[]> => {
        claims.push(request.limit);
        requests.push(request);
        if (gate) await gate;
        if (failures > 0) {
          failures--;
          throw new Error('connection refused');
        }
        if (request.limit > (s.timeoutAbove ?? Number.POSITIVE_INFINITY)) throw statementTimeout();
        const taken = table.slice(0, request.limit);
        table = table.slice(request.limit);
        return taken.map((id) => job(id));
      },
    },
    limitedClaim: {
      claim: async (_pool: unknown, request: ClaimRequest): Promise<LimitedClaim> => {
        requests.push(request);
        if (request.limit > (s.limitedTimeoutAbove ?? s.timeoutAbove ?? Number.POSITIVE_INFINITY))
          throw statementTimeout();
        const queue = request.queues[0]!;
        const room = s.limitedRoom ?? 1;
        const waiting = s.limitedJobs?.get(queue) ?? [];
        const taken = waiting.splice(0, Math.min(room, request.limit));
        return {
          jobs: taken.map((id) => job(id, queue)),
          concurrencyRoom: s.groupHeld === undefined ? room : null,
          rateRoom: null,
          rateWaitMs: null,
          groupHeld: (s.groupHeld ?? false) && waiting.length > 0,
          groupRateWaitMs: null,
          prefetchable: s.prefetchable ?? false,
        };
      },
    },
    queueLimits: {
      limited: async (): Promise<string[]> => {
        limitReads.push(clock.monotonic());
        return s.limited ?? [];
      },
    },
  };
  const loop = new ClaimLoop(
    {
      pool: {} as pg.Pool,
      queries: statements,
      request: { kinds: ['k'], workerId: 'w', visibilityTimeoutMs: 30_000 },
      queues: ['q', ...(s.limited ?? [])],
      pollIntervalMs: 1000,
      concurrency,
      prefetch: s.prefetch ?? 0,
      batchSize: s.batchSize ?? concurrency + (s.prefetch ?? 0),
    },
    {
      held: () => ({
        running: Math.min(heldJobs, concurrency),
        buffered: Math.max(0, heldJobs - concurrency),
        unwritten: 0,
      }),
      dispatch: (jobs) => {
        heldJobs += jobs.length;
        for (let i = 0; i < Math.min(jobs.length, concurrency); i++) loop.jobStarted();
        dispatched.push(jobs.map((j) => j.id));
      },
      onLimited: () => {},
      onError: (error) => errors.push(error),
    },
    loopClock,
  );
  return {
    clock,
    loop,
    claims,
    requests,
    dispatched,
    errors,
    limitReads,
    add: (...ids: number[]) => {
      table.push(...ids);
    },
    free: (n: number) => {
      heldJobs -= n;
      loop.slotFreed();
    },
    failNext: (n: number) => {
      failures = n;
    },
    hold: () => {
      gate = new Promise((resolve) => {
        open = resolve;
      });
    },
    release: () => {
      gate = undefined;
      open();
    },
  };
}

/**
 * A started loop of 2 slots over 1,000 jobs, with prefetch 600 and fast jobs:
 * its first claim took 2, and the next asks for 601 (2 + 600 − 1 running)
 * once a slot frees.
 */
async function prefetchingFastJobs() {
  const s = setup({
    available: Array.from({ length: 1000 }, (_, i) => i + 1),
    concurrency: 2,
    prefetch: 600,
  });
  s.loop.start();
  await settle(s.clock);
  expect(s.claims).toEqual([2]);
  s.loop.jobFinished(0.01);
  return s;
}

describe('ClaimLoop', () => {
  it('idle: claims once at start, then not again until woken, polled or due; the poll comes every pollIntervalMs', async () => {
    const { clock, loop, claims, add } = setup({ available: [1, 2] });
    loop.start();
    await settle(clock);
    expect(claims).toEqual([10]);
    expect(loop.mode).toBe('idle');
    add(3);
    await clock.tick(999);
    expect(claims).toEqual([10]);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toEqual([10, 8]);
    await clock.tick(1000);
    await settle(clock);
    expect(claims).toEqual([10, 8, 7]);
    await loop.stop();
    expect(loop.mode).toBe('stopped');
    expect(clock.pending()).toBe(0);
  });

  it('a full claim claims again as soon as a slot frees; a partial one waits', async () => {
    const { clock, loop, claims, dispatched, free } = setup({
      available: Array.from({ length: 25 }, (_, i) => i + 1),
    });
    loop.start();
    await settle(clock);
    expect(claims).toEqual([10]);
    expect(loop.backlog).toBe(true);
    free(4);
    await settle(clock);
    expect(claims).toEqual([10, 4]);
    free(10);
    await settle(clock);
    expect(claims).toEqual([10, 4, 10]);
    expect(dispatched.map((d) => d.length)).toEqual([10, 4, 10]);
    free(10);
    await settle(clock);
    expect(dispatched.map((d) => d.length)).toEqual([10, 4, 10, 1]);
    expect(loop.backlog).toBe(false);
    free(1);
    await settle(clock);
    expect(claims).toHaveLength(4);
    await loop.stop();
  });

  it('does not claim while no slot is free, and claims when one frees', async () => {
    const { clock, loop, claims, free } = setup({ available: Array.from({ length: 10 }, (_, i) => i + 1) });
    loop.start();
    await settle(clock);
    expect(claims).toEqual([10]);
    // The claim was full: the poll wants another, but every slot is busy.
    await clock.tick(1000);
    await settle(clock);
    expect(claims).toEqual([10]);
    free(3);
    await settle(clock);
    expect(claims).toEqual([10, 3]);
    await loop.stop();
  });

  it('prefetching: after a full claim, the claim also fills a buffer sized by recent run times', async () => {
    const { clock, loop, claims, free } = setup({
      available: Array.from({ length: 40 }, (_, i) => i + 1),
      concurrency: 2,
      prefetch: 8,
    });
    loop.start();
    await settle(clock);
    // No run time known yet and no backlog: the free slots only.
    expect(claims).toEqual([2]);
    expect(loop.backlog).toBe(true);
    expect(loop.bufferLimit()).toBe(Number.POSITIVE_INFINITY);
    // 1 ms jobs: 2 slots start 200 within the 100 ms horizon, so the buffer is prefetch's 8.
    loop.jobFinished(1);
    expect(loop.bufferLimit()).toBe(2 * 8 + 2);
    free(1);
    await settle(clock);
    // The free slot and the buffer topped up by a buffer's worth (a buffer and a half), up to batchSize.
    expect(claims).toEqual([2, 10]);
    // 100 ms jobs: 2 slots start 2 within the horizon.
    for (let i = 0; i < 100; i++) loop.jobFinished(100);
    expect(loop.bufferLimit()).toBe(2 * 2 + 2);
    await loop.stop();
  });

  it('a claim of any size is one statement', async () => {
    const { clock, loop, claims, dispatched, free, hold, release } = await prefetchingFastJobs();
    hold();
    free(1);
    await settle(clock);
    expect(claims).toEqual([2, 602]);
    expect(dispatched).toHaveLength(1);
    release();
    await settle(clock);
    expect(dispatched.map((d) => d.length)).toEqual([2, 602]);
    expect(new Set(dispatched.flat()).size).toBe(604);
    expect(loop.backlog).toBe(true);
    await loop.stop();
  });

  it('prefetching: a buffer that handlers half empty within one turn is topped up in that turn, by a whole buffer', async () => {
    const { clock, loop, claims, free } = await prefetchingFastJobs();
    free(1);
    await settle(clock);
    expect(claims).toEqual([2, 602]);
    // 302 fast handlers settle in one turn: 2 run and 299 wait, the buffer of 600 half empty.
    // Before the turn ends the claim is out: the 301 free places, and 300 more.
    for (let i = 0; i < 302; i++) free(1);
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(claims).toEqual([2, 602, 601]);
    await loop.stop();
  });

  it('wakeAfter: a due time wakes the loop at that time, earliest first', async () => {
    const { clock, loop, claims } = setup();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    loop.wakeAfter(500);
    loop.wakeAfter(200);
    await clock.tick(199);
    expect(claims).toHaveLength(1);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toHaveLength(2);
    await clock.tick(299);
    expect(claims).toHaveLength(2);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toHaveLength(3);
    await loop.stop();
  });

  it('due times that come due together, a retry’s and a message’s, wake once, do not spin, and leave the loop running', async () => {
    let skewMs = 0;
    const { clock, loop, claims } = setup({ skew: () => skewMs });
    loop.start();
    await settle(clock);
    // A retry (not a hint) due in 200 ms, and a hinted time 10 ms after it (a wake-up of its own).
    loop.wakeAfter(200);
    loop.hint(210);
    loop.wakeAfter(900);
    // The wait ends late, as on a busy machine: both times are past when the loop looks.
    skewMs = 30;
    await clock.tick(200);
    await settle(clock);
    expect(claims).toHaveLength(2);
    // Nothing is left due in the past: the loop waits, it does not claim again and again.
    await clock.tick(600);
    await settle(clock);
    expect(claims).toHaveLength(2);
    expect(clock.pending()).toBe(1);
    // The 900 ms one still wakes (at 870 ms on the timers: the clock runs 30 ms ahead).
    await clock.tick(70);
    await settle(clock);
    expect(claims).toHaveLength(3);
    await loop.stop();
  });

  it('a due time is never claimed early: not when its timer ends short of it, nor when it shares a wake-up', async () => {
    // Jobs come due at their time: a claim before it finds nothing.
    let skewMs = 0;
    const { clock, loop, claims, dispatched, add } = setup({ skew: () => skewMs });
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    // The timer ends 0.6 ms short of the due time, as Node's may: the loop waits out the rest.
    loop.wakeAfter(600);
    skewMs = -0.6;
    await clock.tick(600);
    await settle(clock);
    expect(claims).toHaveLength(1);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toHaveLength(2);
    skewMs = 0;
    // Two times 4 ms apart share one wake-up, at the later one (its job is found then), in either order.
    for (const [first, second] of [
      [100, 104],
      [104, 100],
    ] as const) {
      loop.wakeAfter(first);
      loop.hint(second);
      await clock.tick(103);
      await settle(clock);
      const before = claims.length;
      add(7);
      await clock.tick(1);
      await settle(clock);
      expect(claims).toHaveLength(before + 1);
      expect(dispatched.at(-1)).toEqual(['7']);
      await clock.tick(50);
      await settle(clock);
      expect(claims).toHaveLength(before + 1);
    }
    await loop.stop();
  });

  it('due times that come in descending, each a few milliseconds before the last, do not delay the earliest', async () => {
    const { clock, loop, claims, dispatched, add } = setup();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    // 800, 796, … 604 ms: were they one wake-up at the latest, the job due at 604 would wait until 800.
    for (let i = 0; i < 50; i++) loop.wakeAfter(800 - 4 * i);
    await clock.tick(604);
    add(9);
    await clock.tick(5);
    await settle(clock);
    expect(dispatched).toEqual([['9']]);
    await loop.stop();
  });

  it(`keeps at most ${MAX_DUE_TIMES} due times, the earliest`, async () => {
    const { clock, loop, claims } = setup();
    loop.start();
    await settle(clock);
    for (let i = MAX_DUE_TIMES + 10; i >= 1; i--) loop.wakeAfter(i * 10 + 2000);
    // The times beyond the first 1,000 (past 12 s) are left to the poll.
    await clock.tick(12_000);
    await settle(clock);
    const atLastKept = claims.length;
    await clock.tick(100);
    await settle(clock);
    expect(claims.length).toBe(atLastKept);
    await loop.stop();
  });

  it('a burst of 1,000 hints during a claim costs exactly one more claim', async () => {
    const { clock, loop, claims, hold, release } = setup();
    hold();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    expect(loop.mode).toBe('claiming');
    for (let i = 0; i < 1000; i++) loop.hint();
    release();
    await settle(clock);
    expect(claims).toHaveLength(2);
    await clock.tick(500);
    await settle(clock);
    expect(claims).toHaveLength(2);
    await loop.stop();
  });

  it('a message that came while the claim in flight took its job does not make the next message wait', async () => {
    const { clock, loop, claims, add, hold, release, dispatched } = setup();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    // Job 1's message; its claim is slow, and job 2 commits (and its message comes) meanwhile.
    add(1);
    hold();
    loop.hint();
    await settle(clock);
    add(2);
    loop.hint();
    release();
    await settle(clock);
    // The slow claim took both; the claim for job 2's message found nothing.
    expect(dispatched).toEqual([['1', '2']]);
    expect(claims).toHaveLength(3);
    // Job 3's message, 20 ms later, is claimed at once, not after a cooldown.
    await clock.tick(20);
    add(3);
    loop.hint();
    await settle(clock);
    expect(claims).toHaveLength(4);
    expect(dispatched).toEqual([['1', '2'], ['3']]);
    await loop.stop();
  });

  it(`cooling: hinted claims that find nothing, from the second in a row, make the next wait ${HINT_COOLDOWN_MS}, 50, then ${HINT_COOLDOWN_MAX_MS} ms`, async () => {
    const { clock, loop, claims, add } = setup();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    for (let i = 0; i < 1000; i++) loop.hint();
    await settle(clock);
    expect(claims).toHaveLength(2);
    // The first hinted claim to find nothing costs no wait.
    for (let i = 0; i < 1000; i++) loop.hint();
    await settle(clock);
    expect(claims).toHaveLength(3);
    // That one found nothing too: hints wait 25 ms, together; then 50, then 100 ms, where it stays.
    for (let i = 0; i < 1000; i++) loop.hint();
    await settle(clock);
    expect(loop.mode).toBe('cooling');
    for (const [i, waitMs] of [HINT_COOLDOWN_MS, 50, HINT_COOLDOWN_MAX_MS, HINT_COOLDOWN_MAX_MS].entries()) {
      if (i > 0) loop.hint();
      await clock.tick(waitMs - 1);
      expect(claims).toHaveLength(3 + i);
      await clock.tick(1);
      await settle(clock);
      expect(claims).toHaveLength(4 + i);
    }
    // A trusted wake (the poll, a reconnection, a freed slot) does not wait.
    loop.hint();
    await clock.tick(10);
    expect(claims).toHaveLength(7);
    loop.wake();
    await settle(clock);
    expect(claims).toHaveLength(8);
    // A hinted claim that finds a job ends the waits: the next hint claims at once.
    add(1);
    loop.hint();
    await clock.tick(100);
    await settle(clock);
    expect(claims).toHaveLength(9);
    add(2);
    loop.hint();
    await settle(clock);
    expect(claims).toHaveLength(10);
    // Announced due times wait the same way: 50 of them over half a second cost a few claims.
    for (let i = 1; i <= 50; i++) loop.hint(i * 10);
    await clock.tick(600);
    await settle(clock);
    expect(claims.length - 10).toBeLessThanOrEqual(8);
    await loop.stop();
  });

  it('backing off: a failed claim is reported and retried after 100 ms, then 200 ms; wake-ups do not cut the wait', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1);
    const { clock, loop, claims, errors, failNext, add } = setup();
    failNext(2);
    add(1);
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    expect(errors.map((e) => e.message)).toEqual(['connection refused']);
    expect(loop.mode).toBe('backing-off');
    loop.wake();
    loop.hint();
    loop.slotFreed();
    await clock.tick(99);
    expect(claims).toHaveLength(1);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toHaveLength(2);
    expect(errors).toHaveLength(2);
    await clock.tick(199);
    expect(claims).toHaveLength(2);
    await clock.tick(1);
    await settle(clock);
    expect(claims).toHaveLength(3);
    expect(loop.mode).toBe('idle');
    await loop.stop();
  });

  it(`a claim that times out is retried at half the size; the size doubles back after ${SIZE_CAP_RECOVERY_MS} ms without a timeout`, async () => {
    const { clock, loop, claims, errors, free } = setup({
      available: Array.from({ length: 1000 }, (_, i) => i + 1),
      concurrency: 4,
      timeoutAbove: 2,
    });
    const timedOut = 'canceling statement due to statement timeout (SQLSTATE 57014)';
    loop.start();
    await settle(clock);
    await clock.tick(100);
    await settle(clock);
    // 4 timed out (reported); after the back-off, claims of 2 fill the slots.
    expect(claims).toEqual([4, 2, 2]);
    expect(errors.map((e) => e.message)).toEqual([timedOut]);
    free(4);
    await settle(clock);
    expect(claims).toEqual([4, 2, 2, 2, 2]);
    await clock.tick(SIZE_CAP_RECOVERY_MS);
    free(4);
    await settle(clock);
    // A minute on, a claim doubles the size back…
    expect(claims).toEqual([4, 2, 2, 2, 2, 2, 2]);
    free(4);
    await settle(clock);
    await clock.tick(100);
    await settle(clock);
    // …and 4 times out again: half the size for another minute.
    expect(claims).toEqual([4, 2, 2, 2, 2, 2, 2, 4, 2, 2]);
    expect(errors.map((e) => e.message)).toEqual([timedOut, timedOut]);
    await loop.stop();
  });

  it('a limited queue’s claim that times out is retried at half the size; it shrinks its own claims, not the ordinary claim', async () => {
    const { clock, loop, requests, errors, free } = setup({
      available: Array.from({ length: 100 }, (_, i) => 1000 + i),
      concurrency: 8,
      limited: ['lim'],
      limitedJobs: new Map([['lim', Array.from({ length: 100 }, (_, i) => i + 1)]]),
      limitedRoom: 2,
      limitedTimeoutAbove: 2,
    });
    await loop.readLimits();
    loop.start();
    await settle(clock);
    await clock.tick(100);
    await settle(clock);
    await clock.tick(200);
    await settle(clock);
    free(8);
    await settle(clock);
    const claimed = requests.map((r) => `${r.queues.join()}:${r.limit}`);
    // The limited claims of 8 and 4 time out (nothing claimed, retried after back-offs); then
    // 'lim' is asked for 2 at most, and the ordinary claim still for every slot left.
    expect(claimed).toEqual(['lim:8', 'lim:4', 'lim:2', 'q:6', 'lim:2', 'q:6']);
    expect(errors).toHaveLength(2);
    await loop.stop();
  });

  it('stop() during a claim resolves after it, hands its jobs over, and claims nothing more', async () => {
    const { clock, loop, claims, dispatched, hold, release } = setup({ available: [1, 2, 3] });
    hold();
    loop.start();
    await settle(clock);
    expect(claims).toHaveLength(1);
    let stopped = false;
    const stopping = loop.stop().then(() => {
      stopped = true;
    });
    loop.wake();
    loop.hint();
    await settle(clock);
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(dispatched).toEqual([['1', '2', '3']]);
    expect(clock.pending()).toBe(0);
    await clock.tick(5000);
    expect(claims).toHaveLength(1);
    expect(loop.mode).toBe('stopped');
  });

  it('a freed slot during a full claim of a limited queue claims again after it', async () => {
    const limitedJobs = new Map([['lim', [1, 2, 3, 4, 5]]]);
    const { clock, loop, requests, dispatched, free } = setup({
      concurrency: 2,
      limited: ['lim'],
      limitedJobs,
      limitedRoom: 5,
    });
    await loop.readLimits();
    loop.start();
    await settle(clock);
    // The limited queue is claimed for the free slots only.
    expect(requests.map((r) => [r.queues, r.limit])).toEqual([[['lim'], 2]]);
    expect(dispatched).toEqual([['1', '2']]);
    free(1);
    await settle(clock);
    expect(requests.map((r) => [r.queues, r.limit])).toEqual([
      [['lim'], 2],
      [['lim'], 1],
    ]);
    expect(dispatched).toEqual([['1', '2'], ['3']]);
    await loop.stop();
  });

  it('a limited queue whose claim says it may be prefetched is claimed ahead of the free slots while a backlog waits', async () => {
    const limitedJobs = new Map([['grp', Array.from({ length: 30 }, (_, i) => i + 1)]]);
    const { clock, loop, requests, dispatched } = setup({
      concurrency: 2,
      prefetch: 6,
      limited: ['grp'],
      limitedJobs,
      limitedRoom: 100,
      groupHeld: true,
      prefetchable: true,
    });
    loop.jobFinished(1); // fast handlers: the buffer is sized to the prefetch
    await loop.readLimits();
    loop.start();
    await settle(clock);
    // The first claim is for the free slots (the loop does not know yet); it came back full, so the
    // next one also fills the buffer.
    expect(requests.map((r) => [r.queues, r.limit]).slice(0, 2)).toEqual([
      [['grp'], 2],
      [['grp'], 8],
    ]);
    expect(dispatched.slice(0, 2)).toEqual([
      ['1', '2'],
      ['3', '4', '5', '6', '7', '8', '9', '10'],
    ]);
    await loop.stop();
  });

  for (const groupHeld of [true, false]) {
    it(`a grouped queue's claim that a key's limit held back ${groupHeld ? 'claims again when a slot frees' : 'waits for the poll when none was held'}`, async () => {
      const limitedJobs = new Map([['grp', [1, 2, 3]]]);
      const { clock, loop, requests, dispatched, free } = setup({
        concurrency: 4,
        limited: ['grp'],
        limitedJobs,
        limitedRoom: 1,
        groupHeld,
      });
      await loop.readLimits();
      loop.start();
      await settle(clock);
      expect(dispatched).toEqual([['1']]);
      free(1);
      await settle(clock);
      expect(dispatched).toEqual(groupHeld ? [['1'], ['2']] : [['1']]);
      expect(requests.filter((r) => r.queues[0] === 'grp')).toHaveLength(groupHeld ? 2 : 1);
      await loop.stop();
    });
  }

  it('limits are read every poll and after a limits message, at most one read every 50 ms however many come', async () => {
    const { clock, loop, limitReads, claims } = setup();
    await loop.readLimits();
    loop.start();
    await settle(clock);
    expect(limitReads).toHaveLength(1);
    const claimsBefore = claims.length;
    for (let i = 0; i < 100; i++) loop.onLimitsMessage('q');
    loop.onLimitsMessage('another-workers-queue');
    await settle(clock);
    await clock.tick(49);
    expect(limitReads).toHaveLength(1);
    await clock.tick(1);
    await settle(clock);
    expect(limitReads).toHaveLength(2);
    // The read's message wants a claim after it.
    expect(claims.length).toBe(claimsBefore + 1);
    await clock.tick(950);
    await settle(clock);
    expect(limitReads).toHaveLength(3);
    await loop.stop();
  });
});

describe('Coalesced', () => {
  it('runs once more for any number of requests during a run, and loses no request made as a run ends', async () => {
    const clock = fakeClock();
    let runs = 0;
    let finish!: () => void;
    const c = new Coalesced(
      async () => {
        runs++;
        await new Promise<void>((resolve) => {
          finish = resolve;
        });
      },
      0,
      clock,
    );
    c.request();
    await settle(clock);
    expect(runs).toBe(1);
    for (let i = 0; i < 1000; i++) c.request();
    finish();
    await settle(clock);
    expect(runs).toBe(2);
    // A request from a promise callback that settles right after the run: a third run.
    const ended = Promise.resolve().then(() => c.request());
    finish();
    await ended;
    await settle(clock);
    expect(runs).toBe(3);
    finish();
    await c.stop();
    c.request();
    await settle(clock);
    expect(runs).toBe(3);
    expect(clock.pending()).toBe(0);
  });

  it('starts runs at least minIntervalMs apart', async () => {
    const clock = fakeClock();
    const starts: number[] = [];
    const c = new Coalesced(
      async () => {
        starts.push(clock.monotonic());
      },
      50,
      clock,
    );
    c.request();
    await settle(clock);
    c.request();
    c.request();
    await clock.tick(49);
    expect(starts).toHaveLength(1);
    await clock.tick(1);
    await settle(clock);
    expect(starts).toHaveLength(2);
    expect(starts[1]! - starts[0]!).toBe(50);
    await clock.tick(200);
    expect(starts).toHaveLength(2);
    await c.stop();
  });
});
