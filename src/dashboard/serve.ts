/**
 * `serveDashboard`: the dashboard on an HTTP server of its own, as
 * `skiplock dashboard` runs it. It listens on the loopback address unless told
 * otherwise, and refuses any other address without basic auth or read-only mode.
 */
import { serve } from '@hono/node-server';
import { ValidationError } from '../errors.js';
import type { JobMap } from '../job/job.js';
import type { Skiplock } from '../skiplock.js';
import { createDashboard } from './app.js';
import type { DashboardOptions } from './options.js';

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
 * Serves the dashboard over HTTP.
 *
 * @throws {ValidationError} (field `host`) for a non-loopback host without
 *   `basicAuth` or `readOnly`; (field `port`) for a bad port; others from `createDashboard`.
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
  const app = createDashboard(skiplock, dashboardOptions);
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host, overrideGlobalObjects: false }, () =>
      resolve(s),
    );
    s.once('error', reject);
  });
  const address = server.address();
  const actualPort = typeof address === 'object' && address ? address.port : port;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${actualPort}${dashboardOptions.basePath ?? ''}/`,
    port: actualPort,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
