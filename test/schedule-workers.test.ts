import { beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { record } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { gate } from './support/gate.js';

const { db, skiplock } = useFileDatabase();
const schedules = db.jobs.replace(/\.jobs$/, '.schedules');

beforeEach(async () => {
  await db.query(`DELETE FROM ${schedules}`);
  await db.query(`DELETE FROM ${db.jobs}`);
});

async function jobsOf(kind: string) {
  return db.query<{ run_at: Date; early: boolean }>(
    `SELECT run_at, created_at < run_at AS early FROM ${db.jobs} WHERE kind = $1 ORDER BY run_at`,
    [kind],
  );
}

describe('the scheduler in a worker', () => {
  it('a worker enqueues each second of a `* * * * * *` schedule once, at or after its slot; schedules: false does not', async () => {
    const idle = skiplock.worker({
      handlers: {},
      maintenanceOnly: true,
      handleSignals: false,
      schedules: false,
    });
    expect(idle.options.schedules).toBe(false);
    await skiplock.schedule('tick', '* * * * * *', 'tick', {}, { overlap: 'allow' });
    const worker = skiplock.worker({ handlers: {}, maintenanceOnly: true, handleSignals: false });
    worker.on('error', () => {});
    expect(worker.options.schedules).toBe(true);
    await worker.start();
    try {
      await waitFor(async () => (await jobsOf('tick')).length >= 3, 15_000, 'three ticks');
    } finally {
      await worker.stop();
    }
    const jobs = await jobsOf('tick');
    const seconds = jobs.map((j) => j.run_at.getTime() / 1000);
    expect(seconds.every(Number.isInteger)).toBe(true);
    expect(seconds).toEqual(seconds.map((_, i) => seconds[0]! + i));
    expect(jobs.filter((j) => j.early)).toEqual([]);
  });

  it("overlap 'skip': a job slower than its 1-second interval never piles up", async () => {
    const held = gate();
    const worker = skiplock.worker({
      queues: ['slow'],
      handleSignals: false,
      handlers: { slow: () => held.opened },
    });
    worker.on('error', () => {});
    await skiplock.schedule('slow', '* * * * * *', 'slow', {}, { queue: 'slow' });
    await worker.start();
    try {
      const first = await waitFor(
        async () =>
          (
            await db.query<{ run_at: Date }>(
              `SELECT run_at FROM ${db.jobs} WHERE kind = 'slow' AND status = 'running'`,
            )
          )[0]?.run_at,
        15_000,
        'the first job to run',
      );
      await waitFor(
        async () => {
          const [row] = await db.query<{ next_run_at: Date }>(`SELECT next_run_at FROM ${schedules}`);
          return row!.next_run_at.getTime() >= first.getTime() + 4000;
        },
        15_000,
        'three more slots to pass',
      );
      expect(await db.query(`SELECT run_at, status FROM ${db.jobs} WHERE kind = 'slow'`)).toEqual([
        { run_at: first, status: 'running' },
      ]);
    } finally {
      held.open();
      await worker.stop();
    }
  });

  it('keeps enqueueing every slot after every connection to the database is terminated', async () => {
    const worker = skiplock.worker({ handlers: {}, maintenanceOnly: true, handleSignals: false });
    const errors: string[] = [];
    worker.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    await skiplock.schedule(
      'through',
      '* * * * * *',
      'through',
      {},
      {
        overlap: 'allow',
        catchUp: 'all',
        catchUpMs: 60_000,
      },
    );
    await worker.start();
    try {
      await waitFor(async () => (await jobsOf('through')).length >= 2, 15_000, 'two slots before');
      const [cut] = await db.query<{ at: Date }>(
        `SELECT now() AS at, count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await waitFor(
        async () => (await jobsOf('through')).filter((j) => j.run_at > cut!.at).length >= 3,
        20_000,
        `three slots after the connections were cut (errors: ${errors.join('; ')})`,
      );
    } finally {
      await worker.stop();
    }
    const seconds = (await jobsOf('through')).map((j) => j.run_at.getTime() / 1000);
    expect(seconds).toEqual(seconds.map((_, i) => seconds[0]! + i));
  });

  it('a schedule row that does not parse is parked and reported once by name; the others keep firing and the scheduler does not spin', async () => {
    await db.query(
      `INSERT INTO ${schedules} (name, cron, kind, next_run_at) VALUES ('broken', 'every day', 'k', now() - interval '1 second')`,
    );
    await skiplock.schedule('tick', '* * * * * *', 'tick', {}, { overlap: 'allow', queue: 'ticks' });
    // Scheduler work, counted by the server: scans of the schedules table (a
    // turn makes two or three). The counters reach the view within about a
    // second of a busy backend's statements, so a read lags, never leads.
    const scans = async () =>
      (
        await db.query<{ n: number }>(
          `SELECT (seq_scan + COALESCE(idx_scan, 0))::int AS n FROM pg_stat_user_tables WHERE relid = $1::regclass`,
          [schedules],
        )
      )[0]!.n;
    const before = await scans();
    const worker = skiplock.worker({
      queues: ['elsewhere'],
      handlers: { elsewhere: () => {} },
      handleSignals: false,
    });
    const warnings = record(worker, 'worker:warning');
    const errors = record(worker, 'error');
    let ticks = 0;
    let scanned = 0;
    await worker.start();
    try {
      // The period is set by the good schedule's progress: six of its slots.
      await waitFor(async () => (await jobsOf('tick')).length >= 6, 20_000, 'six ticks');
      scanned = (await scans()) - before;
      ticks = (await jobsOf('tick')).length;
    } finally {
      await worker.stop();
    }
    // A busy loop makes hundreds of turns per slot; waiting for the next slot, about one.
    expect(scanned).toBeLessThanOrEqual(20 * ticks + 20);
    // (The test server may also warn about its autovacuum setting.)
    expect(warnings.map(([message]) => message).filter((m) => m.startsWith('schedule '))).toEqual([
      'schedule "broken" parked, no jobs until its row is updated (schedule() or UPDATE): invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2',
    ]);
    expect(errors).toEqual([]);
    expect((await skiplock.schedules()).map((s) => [s.name, s.parkedReason])).toEqual([
      ['broken', 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2'],
      ['tick', null],
    ]);
    expect(await jobsOf('k')).toEqual([]);
  });
});
