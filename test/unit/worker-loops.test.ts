/**
 * The worker's loops in isolation, with their dependencies injected and the
 * clock faked: how the completer batches and leaves no timer behind, and what
 * the heartbeat reports (the claim loop has claim-loop.test.ts). No database:
 * these test the loops' timing rules; the statements they call are tested on
 * PostgreSQL.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type LeasedJob, leaseKey } from '../../src/db/queries/job-row.js';
import { Completer } from '../../src/worker/completer.js';
import { Heartbeat } from '../../src/worker/heartbeat.js';
import { fakeClock } from '../support/fake-clock.js';

/** Lets pending promise callbacks and immediates run (immediates stay real). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await vi.advanceTimersByTimeAsync(0);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Completer', () => {
  function completer() {
    const completeCalls: string[][] = [];
    const succeeded: string[] = [];
    const c = new Completer<LeasedJob>({
      complete: async (jobs) => {
        completeCalls.push(jobs.map((j) => j.id));
        return new Set(jobs.map((j) => `${j.id}#${j.leaseSeq}`));
      },
      fail: async () => [],
      leaseStates: async () => [],
      workerId: 'w',
      successLeavesRow: false,
      onSuccess: (j) => succeeded.push(j.id),
      onFailure: () => {},
      onStale: () => {},
      onError: () => {},
    });
    return { c, completeCalls, succeeded };
  }

  it('writes the successes of one turn in one statement', async () => {
    const { c, completeCalls, succeeded } = completer();
    for (let i = 1; i <= 5; i++) c.succeeded({ id: String(i), attempts: 1, leaseSeq: '1' });
    await settle();
    expect(completeCalls).toEqual([['1', '2', '3', '4', '5']]);
    expect(succeeded).toEqual(['1', '2', '3', '4', '5']);
  });

  it('leaves no timer running after a drain', async () => {
    const { c } = completer();
    c.succeeded({ id: '1', attempts: 1, leaseSeq: '1' });
    const drained = c.drain(30_000);
    await settle();
    await drained;
    expect(vi.getTimerCount()).toBe(0);
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
