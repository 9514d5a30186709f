import { describe, expect, it } from 'vitest';
import { type JobMap, PermanentError, type WorkerOptions } from '../src/index.js';
import { waitFor } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';
import { gate } from './support/gate.js';

const { db, skiplock } = useFileDatabase();

async function jobsWithKey(key: string) {
  return db.query<{ id: string; status: string; payload: unknown; unique_lock: string | null }>(
    `SELECT id::text, status, payload, unique_lock FROM ${db.jobs} WHERE unique_key = $1 ORDER BY id::bigint`,
    [key],
  );
}

/**
 * Runs `body` while a worker (`options`) holds the job of `key`, of kind
 * `kind`, running; then lets it finish and stops the worker.
 */
async function whileRunning(
  key: string,
  kind: string,
  options: Omit<WorkerOptions<JobMap>, 'handlers'>,
  body: () => Promise<void>,
): Promise<void> {
  const held = gate();
  const worker = skiplock.worker({
    handleSignals: false,
    ...options,
    handlers: { [kind]: () => held.opened },
  });
  worker.on('error', () => {});
  await worker.start();
  try {
    await waitFor(async () => (await jobsWithKey(key))[0]?.status === 'running', 10_000, 'the job to run');
    await body();
  } finally {
    held.open();
    await worker.stop();
  }
}

describe('unique keys as workers move jobs', () => {
  it('a key whose job succeeded or went dead can be enqueued again by default, not when its states say so', async () => {
    const ok = await skiplock.enqueue('ok', {}, { uniqueKey: 'again-ok', queue: 'again' });
    const dead = await skiplock.enqueue(
      'boom',
      {},
      { uniqueKey: 'again-dead', queue: 'again', maxAttempts: 1 },
    );
    const failed = await skiplock.enqueue(
      'fatal',
      {},
      { uniqueKey: 'again-failed', queue: 'again', uniqueStates: ['queued', 'running', 'failed'] },
    );
    const worker = skiplock.worker({
      queues: ['again'],
      onSuccess: 'keep',
      handleSignals: false,
      handlers: {
        ok: async () => {},
        boom: async () => {
          throw new Error('boom');
        },
        fatal: async () => {
          throw new PermanentError('no');
        },
      },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      await waitFor(
        async () => {
          const rows = await db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = 'again' AND status IN ('succeeded', 'dead', 'failed')`,
          );
          return rows[0]!.n === 3;
        },
        20_000,
        'the three jobs to finish',
      );
    } finally {
      await worker.stop();
    }
    const statuses = await db.query(
      `SELECT id::text, status, unique_lock FROM ${db.jobs} WHERE queue = 'again' ORDER BY id::bigint`,
    );
    expect(statuses).toEqual([
      { id: ok.id, status: 'succeeded', unique_lock: null },
      { id: dead.id, status: 'dead', unique_lock: null },
      { id: failed.id, status: 'failed', unique_lock: 'again-failed' },
    ]);
    const okAgain = await skiplock.enqueue('ok', {}, { uniqueKey: 'again-ok', queue: 'again2' });
    const deadAgain = await skiplock.enqueue('boom', {}, { uniqueKey: 'again-dead', queue: 'again2' });
    const failedAgain = await skiplock.enqueue('fatal', {}, { uniqueKey: 'again-failed', queue: 'again2' });
    expect([okAgain.duplicate, deadAgain.duplicate, failedAgain.duplicate]).toEqual([false, false, true]);
    expect(failedAgain.id).toBe(failed.id);
  });

  it("'replace' rewrites a queued duplicate (debounce) and leaves a running one alone", async () => {
    const first = await skiplock.enqueue(
      'debounce',
      { v: 1 },
      { uniqueKey: 'rep-1', queue: 'rep', delayMs: 60_000 },
    );
    const runAt = new Date(Date.now() + 3_600_000);
    const replaced = await skiplock.enqueue(
      'debounce',
      { v: 2 },
      { uniqueKey: 'rep-1', queue: 'rep', onConflict: 'replace', runAt, priority: 7, maxAttempts: 3 },
    );
    expect(replaced).toEqual({
      ...first,
      payload: { v: 2 },
      runAt,
      priority: 7,
      maxAttempts: 3,
      duplicate: true,
    });

    // Make it due, and let a worker hold it running.
    await db.query(`UPDATE ${db.jobs} SET run_at = now() WHERE id = $1`, [first.id]);
    await whileRunning('rep-1', 'debounce', { queues: ['rep'], onSuccess: 'keep' }, async () => {
      const onRunning = await skiplock.enqueue(
        'debounce',
        { v: 3 },
        { uniqueKey: 'rep-1', queue: 'rep', onConflict: 'replace', delayMs: 0, priority: 1 },
      );
      expect(onRunning).toMatchObject({ id: first.id, payload: { v: 2 }, priority: 7, duplicate: true });
      const [row] = await db.query(`SELECT payload, priority, max_attempts FROM ${db.jobs} WHERE id = $1`, [
        first.id,
      ]);
      expect(row).toEqual({ payload: { v: 2 }, priority: 7, max_attempts: 3 });
    });
  });

  it("uniqueStates ['queued'] frees the key when the job starts (one waiting, one running)", async () => {
    const first = await skiplock.enqueue(
      'slow',
      {},
      { uniqueKey: 'q-1', queue: 'qonly', uniqueStates: ['queued'] },
    );
    await whileRunning('q-1', 'slow', { queues: ['qonly'] }, async () => {
      const second = await skiplock.enqueue(
        'slow',
        {},
        { uniqueKey: 'q-1', queue: 'other', uniqueStates: ['queued'] },
      );
      const third = await skiplock.enqueue(
        'slow',
        {},
        { uniqueKey: 'q-1', queue: 'other', uniqueStates: ['queued'] },
      );
      expect([second.duplicate, third.duplicate, third.id]).toEqual([false, true, second.id]);
      expect(second.id).not.toBe(first.id);
    });
  });
});
