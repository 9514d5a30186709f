import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Skiplock } from '../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from './support/database.js';

const SCHEDULER = fileURLToPath(new URL('./processes/scheduler-process.ts', import.meta.url));
const PROCESSES = 4;
const SLOTS = 12;

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

async function startScheduler(): Promise<ChildProcess> {
  const child = fork(SCHEDULER, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, SKIPLOCK_URL: db.url, SKIPLOCK_SCHEMA: TEST_SCHEMA },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await Promise.race([once(child, 'message'), once(child, 'exit')])) as unknown[];
  if (message !== 'ready') throw new Error(`scheduler process exited before ready (code ${String(message)})`);
  return child;
}

async function ticks() {
  return db.query<{ second: number; early: boolean }>(
    `SELECT extract(epoch FROM run_at)::float8 AS second, created_at < run_at AS early
     FROM ${db.jobs} WHERE kind = 'tick' ORDER BY run_at, id`,
  );
}

describe('schedules across processes', () => {
  it(`${PROCESSES} worker processes on a 1-second schedule: every slot once, none early, none missed`, async () => {
    const workers = await Promise.all(Array.from({ length: PROCESSES }, () => startScheduler()));
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
});
