/**
 * The dashboard's request guards, mostly through Hono's `app.request()`: the
 * Host check against DNS rebinding, throttled basic-auth guessing, bounded
 * request bodies, plain base paths, the icon, and refusing an unmigrated
 * schema; the command line's side of each through real CLI processes.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AUTH_WINDOW_MS,
  AuthThrottle,
  MAX_AUTH_FAILURES,
  MAX_TRACKED_CLIENTS,
} from '../../src/dashboard/auth-throttle.js';
import { createDashboard, type DashboardServer, serveDashboard } from '../../src/dashboard/index.js';
import { MAX_BODY_BYTES } from '../../src/dashboard/security.js';
import { SchemaVersionError, ValidationError } from '../../src/index.js';
import { runCli, runCliEach } from '../cli/cli-process.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase } from '../support/database.js';

let db: TestDatabase;
let bare: TestDatabase;
const servers: DashboardServer[] = [];

beforeAll(async () => {
  [db, bare] = await Promise.all([createTestDatabase(), createTestDatabase(false)]);
});
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
  await Promise.all([db?.close(), bare?.close()]);
});

async function serve(options: Parameters<typeof serveDashboard>[1] = {}): Promise<DashboardServer> {
  const server = await serveDashboard(db.skiplock(), { port: 0, refreshIntervalMs: 0, ...options });
  servers.push(server);
  return server;
}

/** A GET with the Host header as given (fetch would not send a forged one). */
function getWithHost(server: DashboardServer, host: string, path = '/'): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: server.port, path, headers: { host } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The request environment @hono/node-server gives, with only the client's address. */
const from = (address: string) => ({ incoming: { socket: { remoteAddress: address } } });
const basic = (user: string, password: string) => ({
  authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`,
});

describe('Host header (DNS rebinding)', () => {
  it('a loopback server answers 421 to another host name, and serves its own address and localhost', async () => {
    const server = await serve();
    expect(await getWithHost(server, `127.0.0.1:${server.port}`)).toBe(200);
    expect(await getWithHost(server, `localhost:${server.port}`)).toBe(200);
    expect(await getWithHost(server, `rebind.evil.example:${server.port}`)).toBe(421);
    expect(await getWithHost(server, 'rebind.evil.example', '/jobs')).toBe(421);
    expect(await getWithHost(server, `10.0.0.7:${server.port}`)).toBe(421);
  });

  it('allowedHosts adds names; a server on the wildcard address takes IP addresses but no other name', async () => {
    const named = await serve({ allowedHosts: ['Jobs.Example.com'] });
    expect(await getWithHost(named, `jobs.example.com:${named.port}`)).toBe(200);
    expect(await getWithHost(named, `jobs.example.com.:${named.port}`)).toBe(200);
    expect(await getWithHost(named, `other.example.com:${named.port}`)).toBe(421);
    const wildcard = await serve({ host: '0.0.0.0', readOnly: true });
    expect(await getWithHost(wildcard, `192.168.1.20:${wildcard.port}`)).toBe(200);
    expect(await getWithHost(wildcard, `[::1]:${wildcard.port}`)).toBe(200);
    expect(await getWithHost(wildcard, `rebind.evil.example:${wildcard.port}`)).toBe(421);
  });

  it('createDashboard checks the Host only when given allowedHosts', async () => {
    const open = createDashboard(db.skiplock());
    expect((await open.request('http://anything.example/')).status).toBe(200);
    const checked = createDashboard(db.skiplock(), { allowedHosts: ['jobs.example.com'] });
    expect((await checked.request('http://jobs.example.com/')).status).toBe(200);
    const refused = await checked.request('http://evil.example/');
    expect(refused.status).toBe(421);
    await expect(refused.text()).resolves.toBe(
      'misdirected request: this dashboard does not answer to host "evil.example" (allowedHosts, --allowed-host)',
    );
    for (const bad of ['jobs.example.com:443', 'http://x', '', 'a b']) {
      expect(() => createDashboard(db.skiplock(), { allowedHosts: [bad] }), bad).toThrow(
        expect.objectContaining({ field: 'options.allowedHosts[0]' }),
      );
    }
  });
});

describe('basic auth guessing', () => {
  it(`after ${MAX_AUTH_FAILURES} failures a client gets 429 with Retry-After, even with the right password; others are not held back`, async () => {
    const app = createDashboard(db.skiplock(), { basicAuth: { username: 'ops', password: 's3cret' } });
    for (let i = 0; i < MAX_AUTH_FAILURES; i++) {
      expect((await app.request('/', { headers: basic('ops', `guess${i}`) }, from('10.0.0.1'))).status).toBe(
        401,
      );
    }
    const blocked = await app.request('/', { headers: basic('ops', 'guess') }, from('10.0.0.1'));
    expect(blocked.status).toBe(429);
    const retryAfter = Number(blocked.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(AUTH_WINDOW_MS / 1000);
    expect((await app.request('/', { headers: basic('ops', 's3cret') }, from('10.0.0.1'))).status).toBe(429);
    expect((await app.request('/', { headers: basic('ops', 's3cret') }, from('10.0.0.2'))).status).toBe(200);
    // No credentials at all is the browser's first request: it is not a failure.
    for (let i = 0; i < MAX_AUTH_FAILURES + 1; i++) {
      expect((await app.request('/', {}, from('10.0.0.3'))).status).toBe(401);
    }
    expect((await app.request('/', { headers: basic('ops', 's3cret') }, from('10.0.0.3'))).status).toBe(200);
  });

  it('the throttle forgets a client after its window and after a success, and remembers a bounded number of clients', () => {
    let now = 0;
    const throttle = new AuthThrottle(() => now);
    for (let i = 0; i < MAX_AUTH_FAILURES; i++) throttle.fail('a');
    expect(throttle.retryAfterMs('a')).toBe(AUTH_WINDOW_MS);
    now = AUTH_WINDOW_MS - 1;
    expect(throttle.retryAfterMs('a')).toBe(1);
    now = AUTH_WINDOW_MS;
    expect(throttle.retryAfterMs('a')).toBe(0);
    for (let i = 0; i < MAX_AUTH_FAILURES - 1; i++) throttle.fail('b');
    throttle.succeed('b');
    throttle.fail('b');
    expect(throttle.retryAfterMs('b')).toBe(0);
    for (let i = 0; i < 2 * MAX_TRACKED_CLIENTS; i++) throttle.fail(`client-${i}`);
    expect(throttle.size).toBe(MAX_TRACKED_CLIENTS);
  });
});

describe('request bodies', () => {
  it(`a body over ${MAX_BODY_BYTES} bytes is refused with 413 before it is read, with or without a length`, async () => {
    const app = createDashboard(db.skiplock());
    const job = await db.skiplock().enqueue('kept', {});
    const page = await app.request(`/jobs/${job.id}`);
    const cookie = page.headers.get('set-cookie')!.split(';')[0]!;
    const token = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    const headers = {
      'content-type': 'application/x-www-form-urlencoded',
      origin: 'http://localhost',
      cookie,
    };
    const big = `_csrf=${token}&pad=${'x'.repeat(MAX_BODY_BYTES)}`;
    const sized = await app.request(`http://localhost/jobs/${job.id}/delete`, {
      method: 'POST',
      headers,
      body: big,
    });
    expect(sized.status).toBe(413);
    const streamed = await app.request(`http://localhost/jobs/${job.id}/delete`, {
      method: 'POST',
      headers,
      body: new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(big));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(streamed.status).toBe(413);
    expect(await db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [job.id])).toEqual([
      { status: 'queued' },
    ]);
    const small = await app.request(`http://localhost/jobs/${job.id}/delete`, {
      method: 'POST',
      headers,
      body: `_csrf=${token}`,
    });
    expect(small.status).toBe(303);
    expect(await db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [job.id])).toEqual([]);
  });
});

describe('base path', () => {
  it('refuses anything but a plain path, naming options.basePath', () => {
    for (const bad of [
      '//evil.com',
      '/a//b',
      '/..',
      '/a/./b',
      '/%2e%2e',
      'admin',
      '/a?b',
      '/a#b',
      '/a\\b',
      ' /a',
    ]) {
      const error = (() => {
        try {
          createDashboard(db.skiplock(), { basePath: bad });
        } catch (e) {
          return e;
        }
      })();
      expect(error, bad).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field, bad).toBe('options.basePath');
    }
  });

  it('a trailing slash is dropped: /admin/ serves and links under /admin; / is the root', async () => {
    const app = createDashboard(db.skiplock(), { basePath: '/admin/' });
    for (const path of ['/admin', '/admin/', '/admin/jobs', '/admin/schedules']) {
      expect((await app.request(path)).status, path).toBe(200);
    }
    const body = await (await app.request('/admin')).text();
    expect(body).toContain('href="/admin/jobs"');
    expect(body).not.toContain('href="/admin//');
    const root = createDashboard(db.skiplock(), { basePath: '/' });
    expect((await root.request('/jobs')).status).toBe(200);
    const server = await serve({ basePath: '/ops/' });
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/ops/`);
    expect((await fetch(server.url)).status).toBe(200);
  });
});

describe('icon', () => {
  it('/favicon.ico answers 204 and every page declares an empty icon', async () => {
    const app = createDashboard(db.skiplock(), { basePath: '/admin' });
    const icon = await app.request('/admin/favicon.ico');
    expect(icon.status).toBe(204);
    expect((await createDashboard(db.skiplock()).request('/favicon.ico')).status).toBe(204);
    await expect((await app.request('/admin')).text()).resolves.toContain('<link rel="icon" href="data:,">');
    const server = await serve({ basePath: '/ops' });
    expect((await fetch(new URL('/favicon.ico', server.url))).status).toBe(204);
    expect((await fetch(new URL('/ops/favicon.ico', server.url))).status).toBe(204);
  });
});

describe('an unmigrated database', () => {
  it('serveDashboard refuses to start with the migrate hint', async () => {
    const error = await serveDashboard(bare.skiplock(), { port: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(
      /run migrate\(\) \(or `skiplock migrate( --schema .+)?`\) first/,
    );
  });
});

describe('skiplock dashboard', () => {
  it('refuses an unmigrated database, a bad $SKIPLOCK_DASHBOARD_AUTH and a base path that is not a plain path, each with a message', async () => {
    const conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];
    const [unmigrated, badBase] = await runCliEach([
      ['dashboard', '--port', '0', '--database-url', bare.url, '--schema', TEST_SCHEMA],
      ['dashboard', '--port', '0', '--base-path', '//evil.com', ...conn],
    ]);
    expect(unmigrated!.code).toBe(1);
    expect(unmigrated!.stderr).toMatch(
      /skiplock: error: .*run migrate\(\) \(or `skiplock migrate( --schema .+)?`\) first/,
    );
    expect(unmigrated!.stdout).not.toContain('dashboard at');
    expect(badBase!.code).toBe(2);
    expect(badBase!.stderr).toContain("skiplock: error: invalid --base-path: must be '' or a plain path");
    const badAuth = await runCli(['dashboard', '--port', '0', ...conn], {
      env: { SKIPLOCK_DASHBOARD_AUTH: 'no-colon-here' },
    });
    expect(badAuth.code).toBe(2);
    expect(badAuth.stderr.trim()).toBe(
      'skiplock: error: invalid $SKIPLOCK_DASHBOARD_AUTH: must be USER:PASS, both non-empty.\n(add --help for usage)',
    );
  });
});
