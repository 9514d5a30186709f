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

/**
 * Starts a worker on `queue` with a 60 s poll, enqueues one job per delay (one
 * call each, in order), and waits until every job ran: well before the poll,
 * however loaded the machine, only the wake-up timers can run them. Checks
 * that none ran before it was due (a millisecond of slack for the clocks'
 * rounding).
 */
async function runDelayed(queue: string, delaysMs: readonly number[]): Promise<void> {
  const ran = new Map<string, number>();
  const worker = t.worker({
    queues: [queue],
    pollIntervalMs: 60_000,
    handlers: {
      later: (job) => {
        ran.set(job.id, Date.now());
      },
    },
  });
  await worker.start();
  const due = new Map<string, number>();
  for (const delayMs of delaysMs) {
    const sentAt = Date.now();
    const { id } = await t.skiplock.enqueue('later', {}, { queue, delayMs });
    due.set(id, sentAt + delayMs);
  }
  await waitFor(
    () => ran.size === due.size,
    20_000,
    `all ${due.size} delayed jobs to run`,
    () => ran,
  );
  for (const [id, at] of due) expect(ran.get(id)!).toBeGreaterThanOrEqual(at - 1);
}

describe('chaos: wake-ups with a 60 s poll', () => {
  // Regression test of engine bug 7: the claim loop's wakeAfter (then the fetcher's) kept one timer for the earliest due time
  // and dropped later ones, which then waited for the safety-net poll.
  it('two delayed jobs both run when due, not at the next poll', async () => {
    await runDelayed('wake', [300, 1500]);
  });

  // Due times a few milliseconds apart share one wake-up; it came at the earliest of them, whose
  // claim found the later jobs not yet due and left them to the poll.
  it('jobs due a few milliseconds apart each run when due, not at the next poll', async () => {
    // Eight jobs of the same delay, enqueued one after another; four rounds, as each has about an
    // even chance to lose its last job without the fix.
    for (let round = 1; round <= 4; round++)
      await runDelayed(`near-${round}`, new Array<number>(8).fill(300));
  });
});
