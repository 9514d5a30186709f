/**
 * `serveDashboard`: the dashboard on an HTTP server of its own, as
 * `skiplock dashboard` runs it. It listens on the loopback address unless told
 * otherwise, refuses any other address without basic auth or read-only mode,
 * answers only to the host names of its address (and `allowedHosts`), and
 * refuses to start on a schema that is not migrated.
 */
import { isIP } from 'node:net';
import { serve } from '@hono/node-server';
import { ValidationError } from '../errors.js';
import type { JobMap } from '../job/job.js';
import { assertMigrated } from '../migrations/migrator.js';
import type { Skiplock } from '../skiplock.js';
import { dashboardApp } from './app.js';
import { type DashboardOptions, normalizeHost } from './options.js';

/** Options of {@link serveDashboard}: where to listen, and the dashboard's own options. */
export interface ServeDashboardOptions extends DashboardOptions {
  /** TCP port; 0 picks a free one. @default 4600 */
  port?: number;
  /**
   * Address to listen on. Anything but a loopback address (`127.0.0.1`, `::1`,
   * `localhost`) needs `basicAuth` or `readOnly`. @default '127.0.0.1'
   */
  host?: string;
}

/** A running dashboard server. */
export interface DashboardServer {
  /** `http://host:port/` plus the base path. */
  url: string;
  /** The port listened on. */
  port: number;
  /** Stops listening and ends open connections. */
  close(): Promise<void>;
}

/** Whether `host` is a loopback address. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^(::ffff:)?127(\.\d{1,3}){3}$/.test(host);
}

/**
 * The Host rule of a server listening on `bound`: that address itself, every
 * loopback name when it is a loopback address, any IP address when it is the
 * wildcard (`0.0.0.0`, `::`). A DNS name is accepted only through `allowedHosts`.
 */
export function listenHostRule(bound: string): (host: string) => boolean {
  const address = normalizeHost(bound);
  const loopback = isLoopback(address);
  const wildcard = address === '0.0.0.0' || address === '::';
  return (host) => host === address || (loopback && isLoopback(host)) || (wildcard && isIP(host) !== 0);
}

/**
 * Serves the dashboard over HTTP. Requests whose `Host` header names neither
 * the listening address nor one of `allowedHosts` get 421 (see
 * {@link DashboardOptions.allowedHosts}).
 *
 * @throws {ValidationError} (field `host`) for a non-loopback host without
 *   `basicAuth` or `readOnly`; (field `port`) for a bad port; others from `createDashboard`.
 * @throws {SchemaVersionError} when the schema is not migrated (run `migrate()` or `skiplock migrate` first) or is newer.
 * @throws {Error} when the address cannot be listened on (in use, not local).
 */
export async function serveDashboard<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  options: ServeDashboardOptions = {},
): Promise<DashboardServer> {
  const { port = 4600, host = '127.0.0.1', ...dashboardOptions } = options;
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new ValidationError('port', 'must be an integer between 0 and 65535');
  }
  if (typeof host !== 'string' || host === '')
    throw new ValidationError('host', 'must be a non-empty string');
  if (!isLoopback(host) && !dashboardOptions.basicAuth && !dashboardOptions.readOnly) {
    throw new ValidationError(
      'host',
      `${host} is not a loopback address: give basic auth or read-only mode to listen on it`,
    );
  }
  const app = dashboardApp(skiplock as unknown as Skiplock, dashboardOptions, listenHostRule(host));
  await assertMigrated(skiplock.pool, skiplock.schema);
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    // The server is the dashboard's alone: a browser's icon request at the
    // root, outside the base path, gets an empty answer rather than a 404.
    const fetch = (request: Request) =>
      new URL(request.url).pathname === '/favicon.ico'
        ? new Response(null, { status: 204 })
        : app.fetch(request);
    const s = serve({ fetch, port, hostname: host, overrideGlobalObjects: false }, () => resolve(s));
    s.once('error', reject);
  });
  const address = server.address();
  const actualPort = typeof address === 'object' && address ? address.port : port;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${actualPort}${(dashboardOptions.basePath ?? '').replace(/\/$/, '')}/`,
    port: actualPort,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
