/**
 * Wake-ups the chaos scenarios depend on: a worker with a long safety-net poll
 * must still run every job it was told about when it comes due, not only the
 * earliest one (found by the connection-loss scenario: a retry scheduled
 * behind another one waited for the 60 s poll).
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';

const t = useTestDatabase();

describe('chaos: wake-ups with a 60 s poll', () => {
  // Regression test of engine bug 7: the claim loop's wakeAfter (then the fetcher's) kept one timer for the earliest due time
  // and dropped later ones, which then waited for the safety-net poll.
  it('two delayed jobs both run when due, not at the next poll', async () => {
    const ran = new Map<string, number>();
    const worker = t.worker({
      queues: ['wake'],
      pollIntervalMs: 60_000,
      handlers: {
        later: (job) => {
          ran.set(job.id, Date.now());
        },
      },
    });
    await worker.start();
    const started = Date.now();
    const first = await t.skiplock.enqueue('later', {}, { queue: 'wake', delayMs: 300 });
    const second = await t.skiplock.enqueue('later', {}, { queue: 'wake', delayMs: 1500 });
    // Well before the 60 s poll, however loaded the machine: only the wake-up timers can run them.
    await waitFor(
      () => ran.has(first.id) && ran.has(second.id),
      20_000,
      'both delayed jobs to run',
      () => ran,
    );
    // Not before it was due.
    expect(ran.get(second.id)! - started).toBeGreaterThanOrEqual(1400);
  });

  // Due times a few milliseconds apart share one wake-up; it came at the earliest of them, whose
  // claim found the later jobs not yet due and left them to the poll.
  it('jobs due a few milliseconds apart each run when due, not at the next poll', async () => {
    const ran = new Map<string, number>();
    const worker = t.worker({
      queues: ['near'],
      pollIntervalMs: 60_000,
      handlers: {
        soon: (job) => {
          ran.set(job.id, Date.now());
        },
      },
    });
    await worker.start();
    const due = new Map<string, number>();
    for (let i = 0; i < 12; i++) {
      const delayMs = 400 + 3 * i;
      const sentAt = Date.now();
      const { id } = await t.skiplock.enqueue('soon', { i }, { queue: 'near', delayMs });
      due.set(id, sentAt + delayMs);
    }
    await waitFor(
      () => ran.size === due.size,
      20_000,
      'all 12 delayed jobs to run',
      () => ran,
    );
    // None before it was due (a millisecond of slack for the clocks' rounding).
    for (const [id, at] of due) expect(ran.get(id)!).toBeGreaterThanOrEqual(at - 1);
  });
});
