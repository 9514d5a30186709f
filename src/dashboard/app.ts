/**
 * `createDashboard`: the dashboard as a Hono app, to serve on its own or mount
 * under a path prefix in a Hono, Express or Fastify app.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { JobMap } from '../job/job.js';
import type { Skiplock } from '../skiplock.js';
import { createMetrics, type SkiplockMetrics } from '../telemetry/metrics.js';
import type { Dashboard, DashboardEnv } from './context.js';
import { type DashboardOptions, resolveDashboardOptions } from './options.js';
import { DashboardQueries } from './queries.js';
import { registerActions } from './routes/actions.js';
import { registerControls } from './routes/controls.js';
import { registerPages } from './routes/pages.js';
import { authGuard, bodyGuard, csrfGuard, hostGuard, readOnlyGuard, securityHeaders } from './security.js';

/**
 * Makes the dashboard of a Skiplock: pages for queues, jobs, one job and
 * schedules, the actions requeue, delete, cancel, pause and resume (POST,
 * CSRF-protected, confirmed; none when `readOnly`), and `/metrics` in Prometheus text. Every route lives under
 * `options.basePath`.
 *
 * @example
 * // Hono
 * app.route('/', createDashboard(skiplock, { basePath: '/admin/jobs' }));
 * // Express or Fastify: see toNodeHandler
 * @throws {ValidationError} naming the option (`options.basePath`…).
 */
export function createDashboard<Jobs extends JobMap>(
  typed: Skiplock<Jobs>,
  options: DashboardOptions = {},
): Hono<DashboardEnv> {
  // The dashboard handles every kind alike: it reads the instance without its kind map.
  return dashboardApp(typed as unknown as Skiplock, options);
}

/**
 * {@link createDashboard}, with the Host rule `serveDashboard` adds for the
 * address it listens on.
 */
export function dashboardApp(
  skiplock: Skiplock,
  options: DashboardOptions,
  acceptsHost?: (host: string) => boolean,
): Hono<DashboardEnv> {
  const resolved = resolveDashboardOptions(options);
  const names = resolved.allowedHosts;
  const accepts =
    acceptsHost || names
      ? (host: string) => (names?.includes(host) ?? false) || (acceptsHost?.(host) ?? false)
      : undefined;
  const base = resolved.basePath;
  const d: Dashboard = {
    skiplock,
    pool: skiplock.pool,
    queries: new DashboardQueries(skiplock.schema),
    options: resolved,
    // The home page is the base path itself (no trailing slash), which strict routers of a host app match.
    link: (path) => (path === '/' ? base || '/' : `${base}${path}`),
  };
  const root = new Hono<DashboardEnv>({ strict: false });
  const app = base ? root.basePath(base) : root;
  app.use(
    '*',
    securityHeaders(),
    hostGuard(accepts),
    authGuard(resolved),
    readOnlyGuard(resolved),
    bodyGuard(),
  );
  // Pages declare an empty icon; this answers a browser that asks anyway.
  app.get('/favicon.ico', (c) => c.body(null, 204));
  if (resolved.metrics !== false) app.get('/metrics', metricsHandler(skiplock, resolved.metrics));
  app.use('*', ...csrfGuard(resolved));
  registerPages(app, d);
  registerActions(app, d);
  registerControls(app, d);
  app.notFound((c) => c.text('not found', 404));
  app.onError((error, c) => {
    if (error instanceof HTTPException) return error.getResponse();
    return c.text(`error: ${error instanceof Error ? error.message : String(error)}`, 500);
  });
  return app;
}

function metricsHandler(skiplock: Skiplock, given: true | SkiplockMetrics) {
  let metrics: Promise<SkiplockMetrics> | undefined = given === true ? undefined : Promise.resolve(given);
  return async (c: {
    text(text: string, status: 200 | 501 | 503, headers?: Record<string, string>): Response;
  }) => {
    metrics ??= createMetrics(skiplock);
    let ready: SkiplockMetrics;
    try {
      ready = await metrics;
    } catch (error) {
      metrics = undefined;
      return c.text(`${error instanceof Error ? error.message : String(error)}\n`, 501);
    }
    try {
      return c.text(await ready.text(), 200, { 'Content-Type': ready.contentType });
    } catch (error) {
      return c.text(`metrics unavailable: ${error instanceof Error ? error.message : String(error)}\n`, 503);
    }
  };
}

/**
 * A Node.js `(req, res)` handler of a dashboard, for Express, Fastify or a plain
 * `http` server. The dashboard sees the full URL (Express's `originalUrl` when
 * mounted with `app.use(prefix, …)`), so give it the same `basePath` as the mount.
 *
 * @example
 * // Express
 * app.use('/admin/jobs', toNodeHandler(createDashboard(skiplock, { basePath: '/admin/jobs' })));
 * // Fastify (let the dashboard read form bodies itself)
 * fastify.register(async (scope) => {
 *   const handle = toNodeHandler(createDashboard(skiplock, { basePath: '/admin/jobs' }));
 *   scope.removeAllContentTypeParsers();
 *   scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
 *   const route = (request, reply) => { reply.hijack(); handle(request.raw, reply.raw); };
 *   scope.all('/admin/jobs', route);
 *   scope.all('/admin/jobs/*', route);
 * });
 */
export function toNodeHandler(dashboard: {
  fetch: (request: Request) => Response | Promise<Response>;
}): (req: IncomingMessage, res: ServerResponse) => void {
  const listener = getRequestListener((request) => dashboard.fetch(request), {
    overrideGlobalObjects: false,
  });
  return (req, res) => {
    const original = (req as IncomingMessage & { originalUrl?: unknown }).originalUrl;
    if (typeof original === 'string') req.url = original;
    void listener(req, res);
  };
}
