/**
 * The history of failed attempts kept with a job: one entry per failure
 * (attempt, error, time, worker), the newest 20, kept by requeue and by the
 * archive, appended by the sweeper's reclaim, untouched by snoozes; shown by
 * `getJob`, `listJobs` and `skiplock jobs show`.
 */
import { describe, expect, it } from 'vitest';
import { createDashboard } from '../src/dashboard/index.js';
import { type AttemptError, SnoozeError } from '../src/index.js';
import { runCli } from './cli/cli-process.js';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

/** A handler that fails with the attempt in its message. */
const failNumbered = (job: { attempts: number }) => {
  throw new Error(`boom ${job.attempts}`);
};

async function untilStatus(id: string, status: string, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    async () => (await t.row(id))?.status === status,
    timeoutMs,
    `job ${id} to be ${status}`,
    () => t.row(id),
  );
}

function attemptsOf(errors: AttemptError[]): number[] {
  return errors.map((e) => e.attempt);
}

describe('attempt history', () => {
  it('keeps every failed attempt through a requeue; getJob and listJobs show it', async () => {
    const worker = t.worker({ ...base, handlers: { k: { backoff: 0, handle: failNumbered } } });
    await worker.start();
    const before = new Date(Date.now() - 60_000);
    const job = await t.skiplock.enqueue('k', {}, { maxAttempts: 3 });
    await untilStatus(job.id, 'dead');
    await worker.stop();
    expect(await t.skiplock.requeue({ ids: [job.id] })).toBe(1);
    const got = await t.skiplock.getJob(job.id);
    expect(got).toMatchObject({ status: 'queued', attempts: 0, lastError: null });
    const errors = got!.errors;
    expect(attemptsOf(errors)).toEqual([1, 2, 3]);
    errors.forEach((e, i) => {
      expect(e.error).toMatch(new RegExp(`^Error: boom ${i + 1}\\n`));
      expect(e.workerId).toBe(worker.id);
      expect(e.at).toBeInstanceOf(Date);
      expect(e.at.getTime()).toBeGreaterThan(before.getTime());
      if (i > 0) expect(e.at.getTime()).toBeGreaterThanOrEqual(errors[i - 1]!.at.getTime());
    });
    const [listed] = await t.skiplock.listJobs({ ids: [job.id] });
    expect(listed!.errors).toEqual(errors);
    // A job that never failed has none.
    const fresh = await t.skiplock.enqueue('k', {});
    expect((await t.skiplock.getJob(fresh.id))!.errors).toEqual([]);
  });

  it('keeps the newest 20', async () => {
    const worker = t.worker({ ...base, handlers: { k: { backoff: 0, handle: failNumbered } } });
    await worker.start();
    const job = await t.skiplock.enqueue('k', {}, { maxAttempts: 25 });
    await untilStatus(job.id, 'dead', 60_000);
    const { errors, lastError } = (await t.skiplock.getJob(job.id))!;
    expect(attemptsOf(errors)).toEqual(Array.from({ length: 20 }, (_, i) => i + 6));
    expect(errors.at(-1)!.error).toBe(lastError);
    expect(errors[0]!.error).toMatch(/^Error: boom 6\n/);
  });

  it("cuts an entry's text after 4096 characters; lastError keeps it whole", async () => {
    const long = 'x'.repeat(5000);
    const worker = t.worker({
      ...base,
      handlers: {
        k: () => {
          throw long;
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('k', {}, { maxAttempts: 1 });
    await untilStatus(job.id, 'dead');
    const { errors, lastError } = (await t.skiplock.getJob(job.id))!;
    expect(lastError).toBe(long);
    expect(errors.map((e) => e.error)).toEqual([`${'x'.repeat(4096)}… [truncated]`]);
  });

  it("the sweeper's reclaim counts as a failed attempt", async () => {
    const job = await t.skiplock.enqueue('k', {});
    // A worker claimed it (attempt 1) and died long ago.
    await t.query(
      `UPDATE ${t.jobs} SET status = 'running', attempts = 1, lease_seq = 1, locked_by = 'gone-worker',
              locked_at = now() - interval '1 hour', visibility_timeout_ms = 1000 WHERE id = $1`,
      [job.id],
    );
    expect(await t.skiplock.sweep()).toMatchObject({ requeued: 1, dead: 0 });
    const { errors, status } = (await t.skiplock.getJob(job.id))!;
    expect(status).toBe('queued');
    expect(errors).toEqual([
      { attempt: 1, error: 'reclaimed: visibility timeout', at: expect.any(Date), workerId: 'gone-worker' },
    ]);
  });

  it('is archived with the job', async () => {
    let runs = 0;
    const worker = t.worker({
      ...base,
      onSuccess: 'archive',
      handlers: {
        k: {
          backoff: 0,
          handle: () => {
            if (++runs === 1) throw new Error('first try');
          },
        },
      },
    });
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await t.skiplock.enqueue('k', {});
    await succeeded;
    const [archived] = await waitFor(() =>
      t.query<{ errors: { attempt: number; error: string; worker: string }[] }>(
        `SELECT errors FROM ${t.archive} WHERE id = $1`,
        [job.id],
      ),
    );
    expect(archived!.errors).toMatchObject([{ attempt: 1, worker: worker.id }]);
    expect(archived!.errors[0]!.error).toMatch(/^Error: first try\n/);
  });

  it('gets no entry from a snooze: snoozed three times, the fourth run is attempt 1', async () => {
    const runs: number[] = [];
    const worker = t.worker({
      ...base,
      onSuccess: 'keep',
      handlers: {
        k: (job) => {
          runs.push(job.attempts);
          if (runs.length <= 3) throw new SnoozeError(1);
        },
      },
    });
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await t.skiplock.enqueue('k', {});
    const [done] = await succeeded;
    expect(done.attempts).toBe(1);
    expect(runs).toEqual([1, 1, 1, 1]);
    expect(await t.skiplock.getJob(job.id)).toMatchObject({ status: 'succeeded', attempts: 1, errors: [] });
  });

  it('is printed by skiplock jobs show and shown on the dashboard job page', {
    timeout: 120_000,
  }, async () => {
    const worker = t.worker({ ...base, handlers: { k: { backoff: 0, handle: failNumbered } } });
    await worker.start();
    const job = await t.skiplock.enqueue('k', {}, { maxAttempts: 2 });
    await untilStatus(job.id, 'dead');
    const shown = await runCli(['jobs', 'show', job.id, '--database-url', t.db.url, '--schema', t.schema]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/errors\s+2 failed attempts, oldest first/);
    const id = worker.id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    // The dashboard's job page lists them, newest first.
    const page = await (await createDashboard(t.skiplock).request(`/jobs/${job.id}`)).text();
    const section = page.slice(page.indexOf('<h2>Failed attempts</h2>'));
    expect(section).toMatch(/^<h2>Failed attempts<\/h2>/);
    expect(section.indexOf('Error: boom 2')).toBeGreaterThan(0);
    expect(section.indexOf('Error: boom 2')).toBeLessThan(section.indexOf('Error: boom 1'));
    expect(section).toContain(`<td class="mono">${worker.id}</td>`);
    expect(shown.stdout).toMatch(
      new RegExp(`#1 {2}\\S+Z {2}${id} {2}Error: boom 1\\n {2}#2 {2}\\S+Z {2}${id} {2}Error: boom 2`),
    );
  });
});
