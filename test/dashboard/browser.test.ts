/**
 * The dashboard in a real browser (system Chromium through playwright-core):
 * counts, filters, the requeue button with its confirmation, and escaping.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DashboardServer } from '../../src/dashboard/index.js';
import { JOB_STATUSES } from '../../src/index.js';
import { waitFor } from '../support/database.js';
import { useDashboardInBrowser } from './support/dashboard-in-browser.js';
import { screenshot as saveScreenshot, screenshotFolder } from './support/screenshots.js';
import { SEEDED, type Seeded, seed } from './support/seed.js';

const { db, browser, serve, openPage, inRefreshingPage } = useDashboardInBrowser();
let server: DashboardServer;
let seeded: Seeded;
let shots: ReturnType<typeof screenshotFolder> | undefined;

beforeAll(async () => {
  seeded = await seed(db);
  // One paused queue, so the queues page (and its screenshot) shows the paused state.
  await db.skiplock().pauseQueue('media');
  server = await serve();
  shots = screenshotFolder();
});
afterAll(async () => {
  shots?.remove();
});

/** A fresh page at `path` that records every dialog it sees (and dismisses it unless told otherwise). */
const open = (path: string) => openPage(server, path, 860);

/** Saves a screenshot; with SKIPLOCK_SCREENSHOTS=docs it also replaces docs/dashboard-NAME.png. */
const screenshot = (page: Page, name: string) => saveScreenshot(page, shots!.dir, name);

describe('dashboard in Chromium', () => {
  it('the queues page shows the count of every queue and status, and the chart of finished jobs', async () => {
    const { page, dialogs } = await open('/');
    for (const [queue, counts] of Object.entries(SEEDED)) {
      for (const status of JOB_STATUSES) {
        const cell = page.locator(`td[data-queue="${queue}"][data-status="${status}"]`);
        await expect(cell.textContent()).resolves.toBe(String(counts[status]));
      }
    }
    for (const status of JOB_STATUSES) {
      const total = SEEDED.emails[status] + SEEDED.media[status];
      await expect(page.locator(`td[data-queue="*"][data-status="${status}"]`).textContent()).resolves.toBe(
        String(total),
      );
    }
    const oldest = await page.locator('td[data-queue="emails"][data-oldest-due]').textContent();
    expect(oldest).toMatch(/^1 min 3\d s$/);
    const chart = page.locator('.chart');
    await expect(chart.getAttribute('data-succeeded')).resolves.toBe('4');
    await expect(chart.getAttribute('data-failed')).resolves.toBe('4');
    await screenshot(page, 'queues');
    expect(dialogs).toEqual([]);
    await page.close();
  });

  it('filtering jobs by status shows exactly the jobs of that status, newest first', async () => {
    const { page } = await open('/jobs');
    await page.selectOption('select[name="status"]', 'dead');
    await Promise.all([page.waitForURL(/status=dead/), page.click('button:text("Filter")')]);
    const ids = await page
      .locator('tr[data-job-id]')
      .evaluateAll((rows) => rows.map((r) => [r.getAttribute('data-job-id'), r.getAttribute('data-status')]));
    const expected = [...seeded.ids.dead].sort((a, b) => Number(b) - Number(a));
    expect(ids).toEqual(expected.map((id) => [id, 'dead']));

    await page.goto(new URL('jobs?status=queued&queue=media', server.url).href);
    const queued = await page
      .locator('tr[data-job-id]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job-id')));
    const media = (
      await db.query<{ id: string }>(
        `SELECT id::text FROM ${db.jobs} WHERE status = 'queued' AND queue = 'media' ORDER BY id DESC`,
      )
    ).map((r) => r.id);
    expect(queued).toEqual(media);
    expect(media).toHaveLength(SEEDED.media.queued);

    await page.goto(new URL('jobs', server.url).href);
    await screenshot(page, 'jobs');
    await page.close();
  });

  it("a dead job's requeue button asks first, and on OK turns the job queued in the database", async () => {
    const id = seeded.ids.dead[0]!;
    const page = await browser().newPage({ viewport: { width: 1280, height: 860 } });
    const jobUrl = new URL(`jobs/${id}`, server.url).href;
    await page.goto(jobUrl);
    await screenshot(page, 'job');

    // Cancel: nothing is sent.
    const asked: string[] = [];
    page.once('dialog', (dialog) => {
      asked.push(dialog.message());
      void dialog.dismiss();
    });
    await page.click('button:text("Requeue")');
    expect(asked).toEqual([`Requeue job ${id} (send_invoice_email)? It runs again from attempt 1.`]);
    expect(page.url()).toBe(jobUrl);
    await expect(db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id])).resolves.toEqual([
      { status: 'dead' },
    ]);

    // OK: the POST goes through and the page says so.
    page.once('dialog', (dialog) => void dialog.accept());
    await Promise.all([page.waitForURL(/notice=requeued/), page.click('button:text("Requeue")')]);
    await expect(page.locator('.notice').textContent()).resolves.toBe('Requeued.');
    const row = await waitFor(
      async () =>
        (await db.query(`SELECT status, attempts, last_error FROM ${db.jobs} WHERE id = $1`, [id]))[0],
      5000,
      'the job row',
    );
    expect(row).toEqual({ status: 'queued', attempts: 0, last_error: null });
    await expect(page.locator('.status').first().textContent()).resolves.toBe('queued');
    await page.close();
  });

  it('shows a script payload, error, kind and queue as text: no dialog, no element injected', async () => {
    const payload = '<script>alert(1)</script>';
    const skiplock = db.skiplock();
    const job = await skiplock.enqueue('<img src=x onerror=alert(3)>', payload, {
      queue: '<b id="injected">q</b>',
    });
    await db.query(`UPDATE ${db.jobs} SET status = 'dead', last_error = $2 WHERE id = $1`, [
      job.id,
      '"><svg onload=alert(2)>',
    ]);
    for (const path of [`/jobs/${job.id}`, '/jobs', '/']) {
      const { page, dialogs } = await open(path);
      await expect(page.locator('#injected, img, svg[onload], script:not([nonce])').count()).resolves.toBe(0);
      if (path === `/jobs/${job.id}`) {
        await expect(page.locator('pre[data-field="payload"]').textContent()).resolves.toBe(
          JSON.stringify(payload),
        );
        await expect(page.locator('pre[data-field="last-error"]').textContent()).resolves.toBe(
          '"><svg onload=alert(2)>',
        );
        await expect(page.locator('[data-field="kind"]').textContent()).resolves.toBe(
          '<img src=x onerror=alert(3)>',
        );
      }
      const text = await page.locator('body').textContent();
      expect(text).toContain(path === '/' ? '<b id="injected">q</b>' : '<img src=x onerror=alert(3)>');
      expect(dialogs).toEqual([]);
      await page.close();
    }
  });
  it('refreshes the counts in place, without reloading the page', async () => {
    await inRefreshingPage('', async (page) => {
      const cell = 'td[data-queue="live-refresh"][data-status="queued"]';
      await expect(page.locator(cell).count()).resolves.toBe(0);
      await db.skiplock().enqueueMany([
        { kind: 'k', payload: {}, queue: 'live-refresh' },
        { kind: 'k', payload: {}, queue: 'live-refresh' },
      ]);
      await waitFor(
        async () =>
          (await page.locator(cell).count()) === 1 && (await page.locator(cell).textContent()) === '2',
        10_000,
        'the refreshed count',
      );
      await expect(page.locator('#updated').textContent()).resolves.toMatch(/^updated /);
    });
  });
});
