/**
 * Wake-ups the chaos scenarios depend on: a worker with a long safety-net poll
 * must still run every job it was told about when it comes due, not only the
 * earliest one (found by the connection-loss scenario: a retry scheduled
 * behind another one waited for the 60 s poll).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Skiplock } from '../../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from '../support/database.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

describe('chaos: wake-ups with a 60 s poll', () => {
  // Regression test of engine bug 7: Fetcher.wakeAfter kept one timer for the earliest due time
  // and dropped later ones, which then waited for the safety-net poll.
  it('two delayed jobs both run when due, not at the next poll', async () => {
    const ran = new Map<string, number>();
    const worker = skiplock.worker({
      queues: ['wake'],
      handleSignals: false,
      pollIntervalMs: 60_000,
      handlers: {
        later: (job) => {
          ran.set(job.id, Date.now());
        },
      },
    });
    await worker.start();
    try {
      const started = Date.now();
      const first = await skiplock.enqueue('later', {}, { queue: 'wake', delayMs: 300 });
      const second = await skiplock.enqueue('later', {}, { queue: 'wake', delayMs: 1500 });
      await waitFor(() => ran.has(first.id) && ran.has(second.id), 8_000, 'both delayed jobs to run');
      expect(ran.get(second.id)! - started).toBeGreaterThanOrEqual(1400);
    } finally {
      await worker.stop();
    }
  });
});
