import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { TEST_SCHEMA, waitFor } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';

const SCHEDULER = fileURLToPath(new URL('./processes/scheduler-process.ts', import.meta.url));
const CLOCK_AHEAD = fileURLToPath(new URL('./processes/clock-ahead.ts', import.meta.url));
const PROCESSES = 4;
const SLOTS = 12;

const { db, skiplock } = useFileDatabase();

/** A worker process; with `clockAheadMs`, its wall clock runs that far ahead of the database's. */
async function startScheduler(clockAheadMs = 0): Promise<ChildProcess & { clock: Promise<number> }> {
  const child = fork(SCHEDULER, [], {
    execArgv: ['--import', 'tsx', ...(clockAheadMs ? ['--import', CLOCK_AHEAD] : [])],
    env: {
      ...process.env,
      SKIPLOCK_URL: db.url,
      SKIPLOCK_SCHEMA: TEST_SCHEMA,
      CLOCK_AHEAD_MS: String(clockAheadMs),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const clock = new Promise<number>((resolve) => {
    child.on('message', (m: { now?: number }) => {
      if (typeof m?.now === 'number') resolve(m.now);
    });
  });
  const [message] = (await Promise.race([once(child, 'message'), once(child, 'exit')])) as unknown[];
  if (message !== 'ready') throw new Error(`scheduler process exited before ready (code ${String(message)})`);
  return Object.assign(child, { clock });
}

async function ticks() {
  return db.query<{ second: number; early: boolean }>(
    `SELECT extract(epoch FROM run_at)::float8 AS second, created_at < run_at AS early
     FROM ${db.jobs} WHERE kind = 'tick' ORDER BY run_at, id`,
  );
}

describe('schedules across processes', () => {
  it(`${PROCESSES} worker processes (one with its clock 30 s ahead) on a 1-second schedule: every slot once, none early, none missed`, async () => {
    const workers = await Promise.all(
      Array.from({ length: PROCESSES }, (_, i) => startScheduler(i === 0 ? 30_000 : 0)),
    );
    try {
      await skiplock.schedule('tick', '* * * * * *', 'tick', {}, { overlap: 'allow' });
      await waitFor(async () => (await ticks()).length >= SLOTS, 60_000, `${SLOTS} slots`);
    } finally {
      for (const w of workers) w.kill('SIGTERM');
      await Promise.all(
        workers.map((w) => (w.exitCode === null && w.signalCode === null ? once(w, 'exit') : undefined)),
      );
    }
    const seen = await ticks();
    const seconds = seen.map((t) => t.second);
    expect(seconds.every(Number.isInteger), `slots: ${seconds.join(', ')}`).toBe(true);
    // No slot twice, none missed: consecutive seconds from the first.
    expect(seconds).toEqual(seconds.map((_, i) => seconds[0]! + i));
    expect(seen.filter((t) => t.early)).toEqual([]);
  });

  it('a worker whose clock is 30 s ahead, alone, enqueues no slot early', async () => {
    await db.query(`DELETE FROM ${db.jobs}`);
    await skiplock.unschedule('tick');
    const worker = await startScheduler(30_000);
    try {
      const [row] = await db.query<{ now: Date }>('SELECT now()');
      expect(await worker.clock).toBeGreaterThan(row!.now.getTime() + 25_000);
      await skiplock.schedule('tick', '* * * * * *', 'tick', {}, { overlap: 'allow' });
      await waitFor(async () => (await ticks()).length >= 3, 30_000, 'three slots');
    } finally {
      worker.kill('SIGTERM');
      if (worker.exitCode === null && worker.signalCode === null) await once(worker, 'exit');
    }
    const seen = await ticks();
    expect(seen.filter((t) => t.early)).toEqual([]);
    const seconds = seen.map((t) => t.second);
    expect(seconds).toEqual(seconds.map((_, i) => seconds[0]! + i));
  });
});
