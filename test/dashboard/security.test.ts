/**
 * The dashboard's guards: read-only mode, basic auth, CSRF, and where it may listen.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createDashboard, serveDashboard } from '../../src/dashboard/index.js';
import { ValidationError } from '../../src/index.js';
import { spawnCli } from '../cli/cli-process.js';
import { TEST_SCHEMA } from '../support/database.js';
import { useDashboardInBrowser } from './support/dashboard-in-browser.js';
import { postForm, readCsrf } from './support/forms.js';
import { type Seeded, seed } from './support/seed.js';

const { db, browser, serve } = useDashboardInBrowser();
let seeded: Seeded;

beforeAll(async () => {
  seeded = await seed(db);
});

const statusOf = async (id: string) =>
  (await db.query<{ status: string }>(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status;

describe('read-only mode', () => {
  it('shows no buttons or forms that change state on any page', async () => {
    const server = await serve({ readOnly: true });
    const page = await browser().newPage();
    for (const path of ['', 'jobs', 'jobs?status=dead', `jobs/${seeded.ids.dead[0]}`]) {
      await page.goto(new URL(path, server.url).href);
      await expect(page.locator('form[method="post"]').count()).resolves.toBe(0);
      await expect(page.locator('button:text("Requeue"), button:text("Delete")').count()).resolves.toBe(0);
    }
    await expect(page.locator('.badge').textContent()).resolves.toBe('read-only');
    // A POST forged from the page itself, with its own cookie and origin, is refused.
    const forged = await page.evaluate(async (id) => {
      const res = await fetch(`jobs/${id}/requeue`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: '_csrf=x',
      });
      return res.status;
    }, seeded.ids.dead[0]);
    expect(forged).toBe(403);
    await page.close();
  });

  it('refuses a forged POST with a valid token with 403 and changes nothing', async () => {
    const writable = createDashboard(db.skiplock());
    const readOnly = await serve({ readOnly: true });
    const page = await writable.request('/');
    const cookie = page.headers.get('set-cookie')!.split(';')[0]!;
    const token = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    for (const [path, fields] of [
      [`jobs/${seeded.ids.dead[0]}/requeue`, {}],
      [`jobs/${seeded.ids.queued[1]}/delete`, {}],
      ['queues/requeue', { queue: 'emails' }],
    ] as const) {
      const res = await postForm(new URL(path, readOnly.url).href, { _csrf: token, ...fields }, { cookie });
      expect(res.status).toBe(403);
      await expect(res.text()).resolves.toBe('read-only dashboard: actions are turned off');
    }
    await expect(statusOf(seeded.ids.dead[0]!)).resolves.toBe('dead');
    await expect(statusOf(seeded.ids.queued[1]!)).resolves.toBe('queued');
  });
});

describe('basic auth', () => {
  it('refuses a wrong password and no credentials with 401, and lets the right one in', async () => {
    const server = await serve({ basicAuth: { username: 'ops', password: 's3cret:pw' } });
    const auth = (user: string, password: string) => ({
      authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`,
    });
    const none = await fetch(server.url);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Basic realm="skiplock dashboard"');
    expect((await fetch(server.url, { headers: auth('ops', 'wrong') })).status).toBe(401);
    expect((await fetch(server.url, { headers: auth('nobody', 's3cret:pw') })).status).toBe(401);
    expect((await fetch(new URL('metrics', server.url), { headers: auth('ops', 'wrong') })).status).toBe(401);
    const ok = await fetch(server.url, { headers: auth('ops', 's3cret:pw') });
    expect(ok.status).toBe(200);
    await expect(ok.text()).resolves.toContain('<h1>Queues</h1>');
  });
});

describe('CSRF', () => {
  it('refuses a POST without the token, with a wrong token, or from another origin', async () => {
    const server = await serve({});
    const id = seeded.ids.dead[1]!;
    const url = new URL(`jobs/${id}/requeue`, server.url).href;
    const { cookie, token } = await readCsrf(new URL(`jobs/${id}`, server.url).href);
    expect(cookie).toMatch(/^skiplock_csrf=[A-Za-z0-9_-]{43}$/);
    expect((await postForm(url, {}, { cookie })).status).toBe(403);
    expect((await postForm(url, { _csrf: token! })).status).toBe(403);
    expect((await postForm(url, { _csrf: 'A'.repeat(43) }, { cookie })).status).toBe(403);
    const crossSite = await postForm(url, { _csrf: token! }, { cookie, origin: 'https://evil.example' });
    expect(crossSite.status).toBe(403);
    await expect(statusOf(id)).resolves.toBe('dead');
    const ok = await postForm(url, { _csrf: token!, back: `/jobs/${id}` }, { cookie });
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe(`/jobs/${id}?notice=requeued`);
    await expect(statusOf(id)).resolves.toBe('queued');
  });

  it('never redirects to another site', async () => {
    const server = await serve({});
    const id = seeded.ids.failed[0]!;
    const { cookie, token } = await readCsrf(server.url);
    const res = await postForm(
      new URL(`jobs/${id}/requeue`, server.url).href,
      { _csrf: token!, back: '//evil.example/x' },
      { cookie },
    );
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`/jobs/${id}?notice=requeued`);
  });
});

describe('where it listens', () => {
  it('refuses a non-loopback host without basic auth or read-only mode', async () => {
    await expect(serveDashboard(db.skiplock(), { port: 0, host: '0.0.0.0' })).rejects.toThrow(
      ValidationError,
    );
    await expect(serveDashboard(db.skiplock(), { port: 0, host: '0.0.0.0' })).rejects.toMatchObject({
      field: 'host',
    });
    const server = await serve({ host: '0.0.0.0', readOnly: true });
    expect(server.url).toBe(`http://0.0.0.0:${server.port}/`);
  });

  it('skiplock dashboard exits 2 naming --host, and serves on 127.0.0.1 by default', async () => {
    const conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];
    const refused = spawnCli(['dashboard', '--host', '0.0.0.0', '--port', '0', ...conn]);
    await expect(refused.exited).resolves.toBe(2);
    expect(refused.stderr()).toContain('skiplock: error: invalid --host: 0.0.0.0 is not a loopback address');

    const running = spawnCli(['dashboard', '--port', '0', '--read-only', ...conn]);
    try {
      await running.waitForOutput(/dashboard at http:\/\/127\.0\.0\.1:\d+\//);
      const url = /dashboard at (\S+)/.exec(running.stdout())![1]!;
      const res = await fetch(url);
      expect(res.status).toBe(200);
      await expect(res.text()).resolves.toContain('read-only');
    } finally {
      running.child.kill('SIGTERM');
      await expect(running.exited).resolves.toBe(0);
    }
  });
});
