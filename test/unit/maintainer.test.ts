/**
 * The maintenance loop on a fake clock, its services injected and the
 * advisory lock replaced by a direct call: when each service runs, that they
 * run one at a time, how stop() ends the loop and what an error does. The
 * lock and the services' statements are tested on PostgreSQL.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { MaintenanceTask } from '../../src/db/sql.js';
import type { SkiplockError } from '../../src/errors.js';
import { Maintainer } from '../../src/maintenance/maintainer.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

const client = {} as pg.PoolClient;

/** A service: its name, its interval in ms, and its run (by default, nothing). */
type Service = [name: MaintenanceTask, intervalMs: number, body?: () => Promise<void>];

/**
 * A maintainer over `services`, each recording when it runs; with those runs
 * (`name@ms since start`) and the errors it saw.
 */
function maintainer(clock: FakeClock, ...services: Service[]) {
  return delayedMaintainer(clock, 0, ...services);
}

/** {@link maintainer} whose services first run `startDelayMs` after start. */
function delayedMaintainer(clock: FakeClock, startDelayMs: number, ...services: Service[]) {
  const runs: string[] = [];
  const errors: [string, MaintenanceTask][] = [];
  const startedAt = clock.monotonic();
  const m = new Maintainer(
    {
      lock: (_task, fn) => fn(client),
      services: services.map(([name, intervalMs, body = async () => {}]) => ({
        name,
        intervalMs,
        run: async () => {
          runs.push(`${name}@${clock.monotonic() - startedAt}`);
          await body();
        },
      })),
      onError: (error: SkiplockError, task) => errors.push([error.message, task]),
      startDelayMs,
    },
    clock,
  );
  return { m, errors, runs };
}

describe('Maintainer', () => {
  it('runs every service once at start, then each on its own interval', async () => {
    const clock = fakeClock();
    const { m, runs } = maintainer(clock, ['sweep', 100], ['prune', 250]);
    m.start();
    await clock.tick(0);
    expect(runs).toEqual(['sweep@0', 'prune@0']);
    await clock.tick(99);
    expect(runs).toEqual(['sweep@0', 'prune@0']);
    await clock.tick(1);
    expect(runs).toEqual(['sweep@0', 'prune@0', 'sweep@100']);
    await clock.tick(400);
    expect(runs).toEqual([
      'sweep@0',
      'prune@0',
      'sweep@100',
      'sweep@200',
      'prune@250',
      'sweep@300',
      'sweep@400',
      'sweep@500',
      'prune@500',
    ]);
    await m.stop();
    expect(m.state).toBe('stopped');
    expect(clock.pending()).toBe(0);
  });

  it('with a start delay, runs each service first after the delay, or after its interval when shorter', async () => {
    const clock = fakeClock();
    const { m, runs } = delayedMaintainer(clock, 1_000, ['sweep', 300], ['prune', 5_000]);
    m.start();
    await clock.tick(299);
    expect(runs).toEqual([]);
    await clock.tick(1);
    expect(runs).toEqual(['sweep@300']);
    await clock.tick(699);
    expect(runs).toEqual(['sweep@300', 'sweep@600', 'sweep@900']);
    await clock.tick(1);
    expect(runs).toEqual(['sweep@300', 'sweep@600', 'sweep@900', 'prune@1000']);
    await m.stop();
    expect(clock.pending()).toBe(0);
  });

  it('runs one service at a time, and counts an interval from the end of its run', async () => {
    const clock = fakeClock();
    let running = 0;
    let mostRunning = 0;
    const slow = async () => {
      running++;
      mostRunning = Math.max(mostRunning, running);
      await new Promise<void>((resolve) => clock.setTimeout(resolve, 300));
      running--;
    };
    const { m, runs } = maintainer(clock, ['sweep', 100, slow], ['prune', 100, slow]);
    m.start();
    await clock.tick(0);
    expect(runs).toEqual(['sweep@0']);
    await clock.tick(300);
    expect(runs).toEqual(['sweep@0', 'prune@300']);
    // sweep was due at 400 (300 + 100) while prune ran: it starts when prune ends, at 600.
    await clock.tick(300);
    expect(runs).toEqual(['sweep@0', 'prune@300', 'sweep@600']);
    expect(mostRunning).toBe(1);
    const stopping = m.stop();
    await clock.tick(300);
    await stopping;
    expect(runs).toEqual(['sweep@0', 'prune@300', 'sweep@600']);
  });

  it('stop() waits for the service running, and nothing runs after', async () => {
    const clock = fakeClock();
    let finish: (() => void) | undefined;
    const { m, runs } = maintainer(
      clock,
      ['sweep', 100],
      [
        'prune',
        100,
        () =>
          new Promise<void>((resolve) => {
            finish = resolve;
          }),
      ],
    );
    m.start();
    await clock.tick(0);
    expect(runs).toEqual(['sweep@0', 'prune@0']);
    let stopped = false;
    const stopping = m.stop().then(() => {
      stopped = true;
    });
    await clock.tick(1000);
    expect(stopped).toBe(false);
    expect(m.state).toBe('stopping');
    finish?.();
    await stopping;
    expect(m.state).toBe('stopped');
    await clock.tick(10_000);
    expect(runs).toEqual(['sweep@0', 'prune@0']);
    expect(clock.pending()).toBe(0);
  });

  it('reports an error of one service with its name, and keeps running it and the others', async () => {
    const clock = fakeClock();
    const { m, errors, runs } = maintainer(
      clock,
      [
        'sweep',
        100,
        async () => {
          throw new Error('connection lost');
        },
      ],
      ['prune', 150],
    );
    m.start();
    await clock.tick(300);
    expect(runs).toEqual([
      'sweep@0',
      'prune@0',
      'sweep@100',
      'prune@150',
      'sweep@200',
      'sweep@300',
      'prune@300',
    ]);
    expect(errors).toEqual([
      ['connection lost', 'sweep'],
      ['connection lost', 'sweep'],
      ['connection lost', 'sweep'],
      ['connection lost', 'sweep'],
    ]);
    await m.stop();
  });

  it('wake(task) runs that service now; wake() runs them all', async () => {
    const clock = fakeClock();
    const { m, runs } = maintainer(clock, ['sweep', 1000], ['prune', 1000]);
    m.start();
    await clock.tick(10);
    m.wake('prune');
    await clock.tick(0);
    expect(runs).toEqual(['sweep@0', 'prune@0', 'prune@10']);
    await clock.tick(10);
    m.wake();
    await clock.tick(0);
    expect(runs).toEqual(['sweep@0', 'prune@0', 'prune@10', 'sweep@20', 'prune@20']);
    await m.stop();
  });
});
