/**
 * The worker's loops in isolation, with their dependencies injected and the
 * clock faked: how the completer batches, retries and stops, and what the
 * heartbeat reports (the claim loop has claim-loop.test.ts). No database:
 * these test the loops' timing rules; the statements they call are tested on
 * PostgreSQL.
 */
import { describe, expect, it } from 'vitest';
import type { FinishedJob, FinishingJob, FinishOutcome } from '../../src/db/queries/finish.js';
import { type LeasedJob, leaseKey } from '../../src/db/queries/job-row.js';
import type { LeaseState } from '../../src/db/queries/results.js';
import { DatabaseError } from '../../src/errors.js';
import type { JobStatus } from '../../src/job/job.js';
import { Completer } from '../../src/worker/completer.js';
import { Heartbeat } from '../../src/worker/heartbeat.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

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
    outcome === 'succeeded'
      ? { id: job.id, leaseSeq: job.leaseSeq, outcome, retryDelayMs: 0 }
      : { id: job.id, leaseSeq: job.leaseSeq, outcome, queue: 'q', retryDelayMs },
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

  it('after a write timed out, writes the same results in batches of half the size', async () => {
    const { c, clock, batches, reported } = completer(
      async (jobs) => {
        if (jobs.length > 2) throw new DatabaseError('canceling statement due to statement timeout', '57014');
        return new Map(jobs.map((j) => wrote(j, 'succeeded')));
      },
      (ids) => ids.map((id) => state(Number(id), 'running', 'w')),
    );
    for (let id = 1; id <= 5; id++) c.succeeded(lease(id));
    await turn(clock);
    await clock.tick(100);
    await turn(clock);
    expect(batches.map((b) => b.map((j) => j.id))).toEqual([
      ['1', '2', '3', '4', '5'],
      ['1', '2'],
      ['3', '4'],
      ['5'],
    ]);
    expect(reported).toEqual([
      'error canceling statement due to statement timeout',
      '1 success',
      '2 success',
      '3 success',
      '4 success',
      '5 success',
    ]);
    await c.drain(1000);
    expect(clock.pending()).toBe(0);
  });

  it('writes apart the halves of a batch one value of which the server refuses; alone, that success is written as a failure', async () => {
    const { c, clock, batches, reported } = completer(
      async (jobs) => {
        if (jobs.some((j) => j.id === '4' && j.outcome === 'succeeded'))
          throw new DatabaseError('unsupported Unicode escape sequence', '22P05');
        return new Map(jobs.map((j) => wrote(j, j.outcome === 'failed' ? 'retry' : 'succeeded')));
      },
      (ids) => ids.map((id) => state(Number(id), 'running', 'w')),
    );
    for (let id = 1; id <= 5; id++) c.succeeded(lease(id), { result: '"x"' });
    await turn(clock);
    expect(batches.map((b) => b.map((j) => `${j.id} ${j.outcome}`))).toEqual([
      ['1 succeeded', '2 succeeded', '3 succeeded', '4 succeeded', '5 succeeded'],
      ['1 succeeded', '2 succeeded', '3 succeeded'],
      ['4 succeeded', '5 succeeded'],
      ['4 succeeded'],
      ['4 failed'],
      ['5 succeeded'],
    ]);
    expect(batches[4]![0]).toMatchObject({
      error: 'its outcome could not be stored: unsupported Unicode escape sequence',
      permanent: false,
    });
    expect(reported.filter((r) => !r.startsWith('error'))).toEqual([
      '1 success',
      '2 success',
      '3 success',
      '4 queued 0',
      '5 success',
    ]);
    expect(reported.filter((r) => r.startsWith('error'))).toHaveLength(3);
    await c.drain(1000);
    expect(clock.pending()).toBe(0);
  });

  it('gives up a failure the server refuses alone (the sweeper brings the job back)', async () => {
    const { c, clock, batches, reported } = completer(
      async () => {
        throw new DatabaseError('value too long', '22001');
      },
      (ids) => ids.map((id) => state(Number(id), 'running', 'w')),
    );
    c.failed({ job: lease(1), thrown: new Error('x'), error: 'x', permanent: false });
    await turn(clock);
    expect(batches.map((b) => b.map((j) => `${j.id} ${j.outcome}`))).toEqual([['1 failed']]);
    expect(reported).toEqual(['error value too long']);
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
  it('beats every interval with the held jobs, reports the leases it no longer holds, and renews locked ones apart', async () => {
    const clock = fakeClock();
    const held: LeasedJob[] = [
      { id: '1', attempts: 1, leaseSeq: '1' },
      { id: '2', attempts: 1, leaseSeq: '1' },
    ];
    const beats: string[][] = [];
    const renewed: string[][] = [];
    const lost: string[] = [];
    const h = new Heartbeat<LeasedJob>(
      {
        intervalMs: 100,
        leased: () => held,
        beat: async (jobs) => {
          beats.push(jobs.map((j) => j.id));
          // The first is held but was locked: it is renewed by a statement of its own.
          const first = leaseKey(held[0] as LeasedJob);
          return { held: new Set([first]), cancelRequested: new Set<string>(), locked: new Set([first]) };
        },
        renewLocked: async (jobs) => {
          renewed.push(jobs.map((j) => j.id));
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
    expect(renewed).toEqual([['1']]);
    await clock.tick(100);
    expect(beats).toHaveLength(2);
    await h.stop();
    expect(h.state).toBe('stopped');
    expect(clock.pending()).toBe(0);
    await clock.tick(500);
    expect(beats).toHaveLength(2);
  });

  it('a renewal of a locked lease cut by the statement deadline beats again at once; one that failed otherwise waits for the next beat', async () => {
    const clock = fakeClock();
    const job: LeasedJob = { id: '1', attempts: 1, leaseSeq: '1' };
    const beats: number[] = [];
    const failures = [
      new DatabaseError('canceling statement due to statement timeout', '57014'),
      new DatabaseError('connection lost', '08006'),
    ];
    const h = new Heartbeat<LeasedJob>(
      {
        intervalMs: 100,
        leased: () => [job],
        beat: async () => {
          beats.push(clock.monotonic());
          const key = leaseKey(job);
          return { held: new Set([key]), cancelRequested: new Set<string>(), locked: new Set([key]) };
        },
        renewLocked: async () => {
          const failure = failures.shift();
          if (failure) throw failure;
        },
        onLost: () => {},
        onCancelRequested: () => {},
        onError: () => {},
      },
      clock,
    );
    const start = clock.monotonic();
    h.start();
    await clock.tick(100);
    for (let i = 0; i < 5; i++) await clock.tick(0);
    // The timed-out renewal brought a beat at once; the connection failure did not.
    expect(beats.map((at) => at - start)).toEqual([100, 100]);
    await clock.tick(100);
    expect(beats.map((at) => at - start)).toEqual([100, 100, 200]);
    await h.stop();
    expect(clock.pending()).toBe(0);
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
            finish = () =>
              resolve({
                held: new Set<string>(),
                cancelRequested: new Set<string>(),
                locked: new Set<string>(),
              });
          });
        },
        renewLocked: async () => {},
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
