/**
 * The schedules page in a real browser (system Chromium): every field of a
 * seeded schedule, the link to its last job, escaping, and live refresh.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DashboardServer } from '../../src/dashboard/index.js';
import { TEST_SCHEMA, tableIn, waitFor } from '../support/database.js';
import { useDashboardInBrowser } from './support/dashboard-in-browser.js';
import { screenshot, screenshotFolder } from './support/screenshots.js';

const { db, serve, openPage, inRefreshingPage } = useDashboardInBrowser();
let server: DashboardServer;
let shots: ReturnType<typeof screenshotFolder> | undefined;
const schedulesTable = tableIn(TEST_SCHEMA, 'schedules');

beforeAll(async () => {
  server = await serve();
  shots = screenshotFolder();
});
afterAll(async () => {
  shots?.remove();
});

/** A fresh page at `path` that records every dialog it sees (and dismisses it). */
const open = (path: string) => openPage(server, path, 600);

const field = (page: Page, schedule: string, name: string) =>
  page.locator(`tr[data-schedule="${schedule}"] [data-field="${name}"]`);

describe('schedules page', () => {
  it("lists a schedule's cron, time zone, kind, queue, next and last run, and links its last job", async () => {
    const skiplock = db.skiplock();
    await skiplock.schedule(
      'nightly-report',
      '30 2 * * *',
      'send_report',
      { to: 'ops@example.com' },
      { timezone: 'Europe/Berlin', queue: 'reports' },
    );
    await skiplock.schedule('every-minute', '* * * * *', 'ping', {});
    const job = await skiplock.enqueue('send_report', { to: 'ops@example.com' }, { queue: 'reports' });
    await db.query(
      `UPDATE ${schedulesTable} SET last_run_at = now() - interval '1 day', last_job_id = $2 WHERE name = $1`,
      ['nightly-report', job.id],
    );
    const stored = (await skiplock.schedules()).find((s) => s.name === 'nightly-report')!;

    const { page, dialogs } = await open('');
    await Promise.all([page.waitForURL(/\/schedules$/), page.click('header nav a:text("Schedules")')]);
    await expect(page.locator('header nav a.active').textContent()).resolves.toBe('Schedules');
    const names = await page
      .locator('tr[data-schedule]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-schedule')));
    expect(names).toEqual(['every-minute', 'nightly-report']);
    const text = async (name: string) => field(page, 'nightly-report', name).textContent();
    await expect(text('name')).resolves.toBe('nightly-report');
    await expect(text('cron')).resolves.toBe('30 2 * * *');
    await expect(text('timezone')).resolves.toBe('Europe/Berlin');
    await expect(text('kind')).resolves.toBe('send_report');
    await expect(text('queue')).resolves.toBe('reports');
    await expect(text('payload')).resolves.toBe('{"to":"ops@example.com"}');
    await expect(field(page, 'nightly-report', 'next-run').getAttribute('data-at')).resolves.toBe(
      stored.nextRunAt.toISOString(),
    );
    const shown = (name: string, part: string) =>
      field(page, 'nightly-report', name).locator(part).first().textContent();
    await expect(text('next-run')).resolves.toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ/);
    await expect(shown('next-run', '.muted')).resolves.toMatch(/^in \d/);
    await expect(field(page, 'nightly-report', 'last-run').getAttribute('data-at')).resolves.toBe(
      stored.lastRunAt!.toISOString(),
    );
    await expect(shown('last-run', '.muted')).resolves.toBe('1 d 0 h ago');
    await expect(text('last-job')).resolves.toBe(job.id);
    await expect(field(page, 'every-minute', 'last-run').textContent()).resolves.toBe('never');
    await expect(field(page, 'every-minute', 'last-job').textContent()).resolves.toBe('—');
    await expect(field(page, 'every-minute', 'timezone').textContent()).resolves.toBe('UTC');
    await screenshot(page, shots!.dir, 'schedules');

    await Promise.all([
      page.waitForURL(new RegExp(`/jobs/${job.id}$`)),
      page.click(`tr[data-schedule="nightly-report"] [data-field="last-job"] a`),
    ]);
    await expect(page.locator('h1').textContent()).resolves.toBe(`Job ${job.id}`);
    expect(dialogs).toEqual([]);
    await page.close();
  });

  it('shows a hostile schedule name, kind, queue and payload as text: no dialog, no element injected', async () => {
    const name = '<img src=x onerror=alert(1)>';
    const kind = '<script>alert(2)</script>';
    const queue = '<b id="injected">q</b>';
    const payload = { html: '"><svg onload=alert(3)>' };
    await db.skiplock().schedule(name, '0 * * * *', kind, payload, { queue });
    const { page, dialogs } = await open('schedules');
    await expect(page.locator('#injected, img, svg[onload], script:not([nonce])').count()).resolves.toBe(0);
    await expect(field(page, name, 'name').textContent()).resolves.toBe(name);
    await expect(field(page, name, 'kind').textContent()).resolves.toBe(kind);
    await expect(field(page, name, 'queue').textContent()).resolves.toBe(queue);
    await expect(field(page, name, 'payload').textContent()).resolves.toBe(JSON.stringify(payload));
    await expect(field(page, name, 'queue').getAttribute('href')).resolves.toBe(
      `/jobs?${new URLSearchParams({ queue })}`,
    );
    expect(dialogs).toEqual([]);
    await page.close();
  });

  it('refreshes the list in place, without reloading the page', async () => {
    await inRefreshingPage('schedules', async (page) => {
      await expect(page.locator('tr[data-schedule="added-later"]').count()).resolves.toBe(0);
      await db.skiplock().schedule('added-later', '0 3 * * *', 'cleanup', {});
      await waitFor(
        async () => (await page.locator('tr[data-schedule="added-later"]').count()) === 1,
        10_000,
        'the refreshed schedules',
      );
    });
  });
});
