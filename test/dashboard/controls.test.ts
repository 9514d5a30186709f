/**
 * The queue controls in the dashboard, in a real browser (system Chromium):
 * cancel a job, pause and resume a queue, the `cancelled` status, and
 * read-only mode refusing all of it.
 */
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { createDashboard, type DashboardServer } from '../../src/dashboard/index.js';
import { TEST_SCHEMA, tableIn } from '../support/database.js';
import { useDashboardInBrowser } from './support/dashboard-in-browser.js';
import { postForm, readCsrf } from './support/forms.js';
import { type Seeded, seed } from './support/seed.js';

const { db, browser, serve } = useDashboardInBrowser();
let seeded: Seeded;
let server: DashboardServer;
const queuesTable = tableIn(TEST_SCHEMA, 'queues');

beforeAll(async () => {
  seeded = await seed(db);
  server = await serve({});
});

const jobRow = async (id: string) =>
  (
    await db.query<{ status: string; cancel_requested: boolean }>(
      `SELECT status, cancel_requested_at IS NOT NULL AS cancel_requested FROM ${db.jobs} WHERE id = $1`,
      [id],
    )
  )[0];

const pausedInDb = async (queue: string) =>
  (await db.query<{ paused: boolean }>(`SELECT paused FROM ${queuesTable} WHERE name = $1`, [queue]))[0]
    ?.paused;

/** Clicks a button whose form asks for confirmation, answers OK, and waits for the notice in the URL. */
async function confirmClick(page: Page, button: string, notice: string): Promise<string[]> {
  const asked: string[] = [];
  page.once('dialog', (dialog) => {
    asked.push(dialog.message());
    void dialog.accept();
  });
  await Promise.all([page.waitForURL(new RegExp(`notice=${notice}(&|$)`)), page.click(button)]);
  return asked;
}

describe('cancel', () => {
  it("a queued job's cancel button asks first, and on OK turns the job cancelled in the database", async () => {
    const id = seeded.ids.queued[1]!;
    const page = await browser().newPage();
    const jobUrl = new URL(`jobs/${id}`, server.url).href;
    await page.goto(jobUrl);
    await expect(page.locator('[data-field="cancel-requested-at"]').count()).resolves.toBe(0);

    const dismissed: string[] = [];
    page.once('dialog', (dialog) => {
      dismissed.push(dialog.message());
      void dialog.dismiss();
    });
    await page.click('button:text("Cancel")');
    expect(dismissed).toEqual([`Cancel job ${id} (resize_image)? It will not run.`]);
    expect(page.url()).toBe(jobUrl);
    await expect(jobRow(id)).resolves.toEqual({ status: 'queued', cancel_requested: false });

    const asked = await confirmClick(page, 'button:text("Cancel")', 'cancelled');
    expect(asked).toEqual([`Cancel job ${id} (resize_image)? It will not run.`]);
    await expect(page.locator('.notice').textContent()).resolves.toBe('Cancelled.');
    await expect(jobRow(id)).resolves.toEqual({ status: 'cancelled', cancel_requested: true });
    await expect(page.locator('.status').first().textContent()).resolves.toBe('cancelled');
    await expect(page.locator('[data-field="cancel-requested-at"]').textContent()).resolves.toMatch(
      /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(\d+ (ms|s) ago\)$/,
    );
    // A cancelled job can be requeued or deleted, not cancelled again.
    await expect(page.locator('button:text("Cancel")').count()).resolves.toBe(0);
    await expect(page.locator('button:text("Requeue")').count()).resolves.toBe(1);

    // The cancelled status is a filter of the jobs list and a column of the queues page.
    await page.goto(new URL('jobs', server.url).href);
    await page.selectOption('select[name="status"]', 'cancelled');
    await Promise.all([page.waitForURL(/status=cancelled/), page.click('button:text("Filter")')]);
    const rows = await page
      .locator('tr[data-job-id]')
      .evaluateAll((trs) => trs.map((r) => [r.getAttribute('data-job-id'), r.getAttribute('data-status')]));
    expect(rows).toEqual([[id, 'cancelled']]);
    await page.goto(server.url);
    await expect(
      page.locator('td[data-queue="emails"][data-status="cancelled"]').textContent(),
    ).resolves.toBe('1');
    await page.close();
  });

  it('cancels a queued job from its row of the jobs list, back to the same filtered list; requeue undoes it', async () => {
    const id = seeded.ids.queued[2]!;
    const page = await browser().newPage();
    await page.goto(new URL('jobs?status=queued&queue=emails', server.url).href);
    await confirmClick(page, `tr[data-job-id="${id}"] button:text("Cancel")`, 'cancelled');
    const url = new URL(page.url());
    expect([url.pathname, url.searchParams.get('status'), url.searchParams.get('queue')]).toEqual([
      '/jobs',
      'queued',
      'emails',
    ]);
    await expect(jobRow(id)).resolves.toEqual({ status: 'cancelled', cancel_requested: true });
    await expect(page.locator(`tr[data-job-id="${id}"]`).count()).resolves.toBe(0);

    // A cancelled job's requeue button brings it back, the cancel forgotten.
    await page.goto(new URL(`jobs/${id}`, server.url).href);
    await confirmClick(page, 'button:text("Requeue")', 'requeued');
    await expect(jobRow(id)).resolves.toEqual({ status: 'queued', cancel_requested: false });
    await page.close();
  });

  it("a running job's cancel asks its worker to stop: the request is recorded and the button goes", async () => {
    const id = seeded.ids.running[0]!;
    const page = await browser().newPage();
    await page.goto(new URL(`jobs/${id}`, server.url).href);
    await expect(page.locator('button:text("Delete")').count()).resolves.toBe(0);
    const asked = await confirmClick(page, 'button:text("Cancel")', 'cancel-requested');
    expect(asked).toEqual([
      `Cancel job ${id} (resize_image)? Its worker is told to abort the handler; the job ends cancelled and is not retried.`,
    ]);
    await expect(page.locator('.notice').textContent()).resolves.toMatch(/^Cancel requested: /);
    // No worker holds this seeded lease, so the job stays running with the request recorded.
    await expect(jobRow(id)).resolves.toEqual({ status: 'running', cancel_requested: true });
    await expect(page.locator('[data-field="cancel-requested-at"]').count()).resolves.toBe(1);
    await expect(page.locator('button:text("Cancel")').count()).resolves.toBe(0);
    await page.close();
  });

  it('a cancel of a finished job changes nothing and says so', async () => {
    const id = seeded.ids.dead[0]!;
    const { cookie, token } = await readCsrf(new URL(`jobs/${id}`, server.url).href);
    const res = await postForm(
      new URL(`jobs/${id}/cancel`, server.url).href,
      { _csrf: token!, back: `/jobs/${id}` },
      { cookie },
    );
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`/jobs/${id}?notice=cancel-none`);
    await expect(jobRow(id)).resolves.toEqual({ status: 'dead', cancel_requested: false });
  });
});

describe('pause and resume', () => {
  it('pause marks the queue paused in the database and on the page; resume undoes it', async () => {
    const page = await browser().newPage({ viewport: { width: 1280, height: 860 } });
    await page.goto(server.url);
    const row = page.locator('tr[data-queue-row="media"]');
    await expect(row.getAttribute('data-paused')).resolves.toBe('false');
    await expect(row.locator('.status-paused').count()).resolves.toBe(0);

    const asked = await confirmClick(page, 'tr[data-queue-row="media"] button:text("Pause")', 'paused');
    expect(asked).toEqual([
      'Pause queue "media"? Workers claim no more of its jobs until it is resumed; running jobs finish.',
    ]);
    await expect(page.locator('.notice').textContent()).resolves.toBe(
      'Paused: workers claim no more jobs of the queue; running jobs finish.',
    );
    await expect(pausedInDb('media')).resolves.toBe(true);
    await expect(pausedInDb('emails')).resolves.toBeUndefined();
    await expect(row.getAttribute('data-paused')).resolves.toBe('true');
    await expect(row.locator('.status-paused').textContent()).resolves.toBe('paused');
    await expect(row.locator('button:text("Pause")').count()).resolves.toBe(0);
    await expect(page.locator('tr[data-queue-row="emails"]').getAttribute('data-paused')).resolves.toBe(
      'false',
    );

    await confirmClick(page, 'tr[data-queue-row="media"] button:text("Resume")', 'resumed');
    await expect(page.locator('.notice').textContent()).resolves.toBe('Resumed.');
    await expect(pausedInDb('media')).resolves.toBe(false);
    await expect(row.getAttribute('data-paused')).resolves.toBe('false');
    await expect(row.locator('button:text("Pause")').count()).resolves.toBe(1);
    await page.close();
  });

  it("shows each queue's global limits, and a dash for none", async () => {
    await db
      .skiplock()
      .setQueueLimits('limited queue', { concurrency: 3, rate: { count: 50, periodMs: 1000 } });
    const page = await browser().newPage();
    await page.goto(server.url);
    await expect(page.locator('td[data-queue="limited queue"][data-limits]').textContent()).resolves.toBe(
      '≤ 3 running · 50 starts / 1 s',
    );
    await expect(page.locator('td[data-queue="emails"][data-limits]').textContent()).resolves.toBe('—');
    await db.skiplock().setQueueLimits('limited queue', { concurrency: null, rate: null });
    await page.close();
  });

  it('lists a paused queue without jobs, so it can be resumed', async () => {
    await db.skiplock().pauseQueue('empty <i>queue</i>');
    const page = await browser().newPage();
    await page.goto(server.url);
    const row = page.locator('tr[data-queue-row="empty <i>queue</i>"]');
    await expect(row.getAttribute('data-paused')).resolves.toBe('true');
    await expect(row.locator('i').count()).resolves.toBe(0);
    await confirmClick(page, 'tr[data-queue-row="empty <i>queue</i>"] button:text("Resume")', 'resumed');
    await expect(pausedInDb('empty <i>queue</i>')).resolves.toBe(false);
    await page.close();
  });

  it('says so when the queue was paused already, and refuses a form without a usable queue name', async () => {
    const { cookie, token } = await readCsrf(server.url);
    const post = (path: string, fields: Record<string, string>) =>
      postForm(new URL(path, server.url).href, { _csrf: token!, ...fields }, { cookie });
    await db.skiplock().pauseQueue('emails');
    const again = await post('queues/pause', { queue: 'emails', back: '/' });
    expect([again.status, again.headers.get('location')]).toEqual([303, '/?notice=paused-already']);
    const resumed = await post('queues/resume', { queue: 'emails' });
    expect([resumed.status, resumed.headers.get('location')]).toEqual([303, '/?notice=resumed']);
    const notPaused = await post('queues/resume', { queue: 'emails' });
    expect(notPaused.headers.get('location')).toBe('/?notice=resumed-already');
    for (const fields of [{}, { queue: '' }, { queue: 'a\u0000b' }]) {
      const res = await post('queues/pause', fields);
      expect(res.status).toBe(400);
    }
    await expect(
      db.query(`SELECT name, paused FROM ${queuesTable} WHERE name LIKE 'a%' OR name = ''`),
    ).resolves.toEqual([]);
    await expect(pausedInDb('emails')).resolves.toBe(false);
  });
});

describe('read-only mode', () => {
  it('shows no cancel, pause or resume button, and refuses forged POSTs to them with 403', async () => {
    await db.skiplock().pauseQueue('paused-ro');
    const queuedId = seeded.ids.queued[0]!;
    const runningId = (await db.skiplock().enqueue('k', {}, { queue: 'ro' })).id;
    await db.query(
      `UPDATE ${db.jobs} SET status = 'running', locked_at = now(), locked_by = 'w' WHERE id = $1`,
      [runningId],
    );
    const readOnly = await serve({ readOnly: true });
    const page = await browser().newPage();
    for (const path of [
      '',
      'jobs',
      'jobs?status=queued',
      `jobs/${queuedId}`,
      `jobs/${runningId}`,
      'schedules',
    ]) {
      await page.goto(new URL(path, readOnly.url).href);
      await expect(page.locator('form[method="post"]').count()).resolves.toBe(0);
      await expect(
        page.locator('button:text("Cancel"), button:text("Pause"), button:text("Resume")').count(),
      ).resolves.toBe(0);
    }
    await page.goto(readOnly.url);
    await expect(page.locator('tr[data-queue-row="paused-ro"] .status-paused').textContent()).resolves.toBe(
      'paused',
    );
    await page.close();

    // A valid token and cookie from a writable dashboard on the same database do not help.
    const writable = createDashboard(db.skiplock());
    const home = await writable.request('/');
    const cookie = home.headers.get('set-cookie')!.split(';')[0]!;
    const token = /name="_csrf" value="([^"]+)"/.exec(await home.text())![1]!;
    for (const [path, fields] of [
      [`jobs/${queuedId}/cancel`, {}],
      [`jobs/${runningId}/cancel`, {}],
      ['queues/pause', { queue: 'emails' }],
      ['queues/resume', { queue: 'paused-ro' }],
    ] as const) {
      const res = await postForm(new URL(path, readOnly.url).href, { _csrf: token, ...fields }, { cookie });
      expect(res.status).toBe(403);
      await expect(res.text()).resolves.toBe('read-only dashboard: actions are turned off');
    }
    await expect(jobRow(queuedId)).resolves.toEqual({ status: 'queued', cancel_requested: false });
    await expect(jobRow(runningId)).resolves.toEqual({ status: 'running', cancel_requested: false });
    await expect(pausedInDb('emails')).resolves.toBe(false);
    await expect(pausedInDb('paused-ro')).resolves.toBe(true);
  });
});

describe('CSRF on the new routes', () => {
  it('refuses cancel and pause without the token or from another origin', async () => {
    const id = seeded.ids.queued[0]!;
    const { cookie, token } = await readCsrf(server.url);
    for (const [path, fields] of [
      [`jobs/${id}/cancel`, {}],
      ['queues/pause', { queue: 'media' }],
    ] as const) {
      const url = new URL(path, server.url).href;
      expect((await postForm(url, { ...fields }, { cookie })).status).toBe(403);
      expect((await postForm(url, { _csrf: token!, ...fields })).status).toBe(403);
      const crossSite = await postForm(
        url,
        { _csrf: token!, ...fields },
        { cookie, origin: 'https://evil.example' },
      );
      expect(crossSite.status).toBe(403);
    }
    await expect(jobRow(id)).resolves.toEqual({ status: 'queued', cancel_requested: false });
    await expect(pausedInDb('media')).resolves.toBe(false);
  });
});
