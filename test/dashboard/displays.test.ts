/**
 * What the pages say about states that are easy to misread: an attempt limit
 * the kind sets at the first claim, a cancelled job's run_at, a schedule's
 * last job that is gone, a parked schedule, and succeeded jobs that were
 * deleted. Through Hono's `app.request()`.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { createDashboard } from '../../src/dashboard/index.js';
import { TEST_SCHEMA, tableIn } from '../support/database.js';
import { nextEvent } from '../support/events.js';
import { useFileDatabase } from '../support/file-database.js';

const { db, skiplock } = useFileDatabase();
const schedules = tableIn(TEST_SCHEMA, 'schedules');

beforeEach(async () => {
  await db.query(`DELETE FROM ${db.jobs}`);
  await db.query(`DELETE FROM ${schedules}`);
});

async function page(path: string): Promise<string> {
  const res = await createDashboard(skiplock, { refreshIntervalMs: 0 }).request(path);
  expect(res.status, path).toBe(200);
  return res.text();
}

/** The inner HTML of the element carrying `data-field="<name>"` inside the row marked by `row`. */
function field(body: string, row: string, name: string): string {
  const start = body.indexOf(row);
  expect(start, row).toBeGreaterThanOrEqual(0);
  const rest = body.slice(start, body.indexOf('</tr>', start));
  const match = new RegExp(`data-field="${name}"[^>]*>([\\s\\S]*?)</(td|dd)>`).exec(rest);
  expect(match, `${row} ${name}`).not.toBeNull();
  return match![1]!;
}

const text = (htmlText: string) =>
  htmlText
    .replace(/<br>/g, ' ')
    .replace(/<[^>]+>/g, '')
    .replace(/\s+/g, ' ')
    .trim();

describe('attempt limits', () => {
  it("a job enqueued without maxAttempts shows its kind's limit, not 20, until a worker claims it", async () => {
    const open = await skiplock.enqueue('limited', {}, { queue: 'displays' });
    const own = await skiplock.enqueue('limited', {}, { queue: 'displays', maxAttempts: 5 });
    const list = await page('/jobs');
    expect(text(field(list, `data-job-id="${open.id}"`, 'attempts'))).toBe("0/kind's");
    expect(text(field(list, `data-job-id="${own.id}"`, 'attempts'))).toBe('0/5');
    expect(text(field(await page(`/jobs/${open.id}`), '<dl', 'attempts'))).toBe(
      "0 of the kind's maxAttempts (set at the first claim; 20 when its handler gives none)",
    );

    await skiplock.cancel({ ids: [own.id] });
    const worker = skiplock.worker({
      queues: ['displays'],
      handleSignals: false,
      handlers: {
        limited: {
          maxAttempts: 3,
          backoff: 3_600_000,
          handle: () => {
            throw new Error('not yet');
          },
        },
      },
    });
    const failed = nextEvent(worker, 'job:failure');
    await worker.start();
    try {
      await failed;
    } finally {
      await worker.stop();
    }
    expect(text(field(await page('/jobs'), `data-job-id="${open.id}"`, 'attempts'))).toBe('1/3');
    expect(text(field(await page(`/jobs/${open.id}`), '<dl', 'attempts'))).toBe('1 of 3');
  });
});

describe('cancelled jobs', () => {
  it('show no "run at in 8 min": the list shows a dash, the job page says it will not run', async () => {
    const job = await skiplock.enqueue('later', {}, { delayMs: 8 * 60_000 });
    expect(text(field(await page('/jobs'), `data-job-id="${job.id}"`, 'run-at'))).toMatch(
      /^in 7 min|^in 8 min/,
    );
    await skiplock.cancel({ ids: [job.id] });
    const list = await page('/jobs');
    expect(text(field(list, `data-job-id="${job.id}"`, 'run-at'))).toBe('—');
    const one = text(field(await page(`/jobs/${job.id}`), '<dl', 'run-at'));
    expect(one).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(cancelled: it will not run\)$/);
  });
});

describe('schedules', () => {
  it("links a schedule's last job while it is stored, and says so once it is gone", async () => {
    await skiplock.schedule('kept', '0 0 1 1 *', 'k', {});
    await skiplock.schedule('gone', '0 0 1 1 *', 'k', {});
    const job = await skiplock.enqueue('k', {});
    await db.query(`UPDATE ${schedules} SET last_run_at = now(), last_job_id = $1 WHERE name = 'kept'`, [
      job.id,
    ]);
    await db.query(
      `UPDATE ${schedules} SET last_run_at = now(), last_job_id = 987654321 WHERE name = 'gone'`,
    );
    const body = await page('/schedules');
    expect(field(body, 'data-schedule="kept"', 'last-job')).toBe(`<a href="/jobs/${job.id}">${job.id}</a>`);
    const gone = field(body, 'data-schedule="gone"', 'last-job');
    expect(gone).not.toContain('<a ');
    expect(text(gone)).toBe('987654321 (no longer stored)');
  });

  it('shows a parked schedule as parked, with the reason, instead of a next run', async () => {
    await db.query(
      `INSERT INTO ${schedules} (name, cron, kind, next_run_at, parked_reason)
       VALUES ('broken', 'every day', 'k', now(), 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2')`,
    );
    const body = await page('/schedules');
    expect(body).toContain('<tr data-schedule="broken" data-parked="true">');
    expect(text(field(body, 'data-schedule="broken"', 'next-run'))).toBe(
      'parked invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2 no jobs until the schedule is saved again (schedule()) or its row updated',
    );
  });
});

describe('succeeded jobs', () => {
  it('with none stored (deleted on success, the default), the queues page says why it counts none', async () => {
    await skiplock.enqueue('k', {});
    expect(await page('/')).toContain('data-field="succeeded-note"');
    await db.query(
      `INSERT INTO ${db.jobs} (kind, status, finished_at) VALUES ('k', 'succeeded', now() - interval '1 minute')`,
    );
    expect(await page('/')).not.toContain('data-field="succeeded-note"');
  });
});
