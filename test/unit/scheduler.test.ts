/**
 * When the scheduler wakes, on a fake clock: its turns come from a script (the
 * statements that enqueue slots are tested on PostgreSQL), and the maintenance
 * loop that runs them waits as the scheduler asks.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Maintainer } from '../../src/maintenance/maintainer.js';
import {
  MAX_JOBS_PER_TURN,
  SCHEDULE_CHECK_MS,
  type SchedulerTurn,
  turnsService,
} from '../../src/schedule/scheduler.js';
import { fakeClock } from '../support/fake-clock.js';

/** A maintainer running only the scheduler, whose turns return `turns` in order (then no schedules). */
function scheduler(turns: Partial<SchedulerTurn>[]) {
  const clock = fakeClock();
  const startedAt = clock.monotonic();
  const at: number[] = [];
  const enqueued: number[] = [];
  const service = turnsService(
    async () => {
      at.push(clock.monotonic() - startedAt);
      return { enqueued: 0, parked: [], untilNextMs: null, ...turns.shift() };
    },
    () => {},
    (turn) => enqueued.push(turn.enqueued),
  );
  const m = new Maintainer(
    { lock: (_task, fn) => fn({} as pg.PoolClient), services: [service], onError: () => {} },
    clock,
  );
  return { clock, m, at, enqueued };
}

describe('scheduler timing', () => {
  it('wakes at the next slot, but looks again at least every SCHEDULE_CHECK_MS', async () => {
    const { clock, m, at, enqueued } = scheduler([
      { untilNextMs: 250 },
      { enqueued: 1, untilNextMs: 5_000 },
      { enqueued: 2, untilNextMs: 0.2 },
    ]);
    m.start();
    await clock.tick(249);
    expect(at).toEqual([0]);
    await clock.tick(1);
    expect(at).toEqual([0, 250]);
    // The next slot is 5 s away: it looks again after SCHEDULE_CHECK_MS all the same.
    await clock.tick(SCHEDULE_CHECK_MS - 1);
    expect(at).toEqual([0, 250]);
    await clock.tick(1);
    expect(at).toEqual([0, 250, 1250]);
    // A slot due in under a millisecond: the next look is one millisecond later.
    await clock.tick(1);
    expect(at).toEqual([0, 250, 1250, 1251]);
    expect(enqueued).toEqual([1, 2]);
    // Without schedules, it looks every SCHEDULE_CHECK_MS.
    await clock.tick(2 * SCHEDULE_CHECK_MS);
    expect(at).toEqual([0, 250, 1250, 1251, 2251, 3251]);
    await m.stop();
    expect(clock.pending()).toBe(0);
  });

  it('after a catch-up turn that reached the job budget, waits the full interval', async () => {
    const { clock, m, at } = scheduler([{ enqueued: MAX_JOBS_PER_TURN, untilNextMs: 0 }]);
    m.start();
    await clock.tick(SCHEDULE_CHECK_MS - 1);
    expect(at).toEqual([0]);
    await clock.tick(1);
    expect(at).toEqual([0, SCHEDULE_CHECK_MS]);
    await m.stop();
  });

  it('wakes at once on wake()', async () => {
    const { clock, m, at } = scheduler([{ untilNextMs: 900 }]);
    m.start();
    await clock.tick(100);
    m.wake('schedule');
    await clock.tick(0);
    expect(at).toEqual([0, 100]);
    await clock.tick(SCHEDULE_CHECK_MS - 1);
    expect(at).toEqual([0, 100]);
    await clock.tick(1);
    expect(at).toEqual([0, 100, 1100]);
    await m.stop();
  });
});
