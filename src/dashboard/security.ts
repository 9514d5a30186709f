/**
 * The dashboard's guards: basic auth, read-only mode, CSRF (same-origin check
 * plus a double-submit token) and response headers with a per-request nonce,
 * so only the dashboard's own inline script and style run.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { basicAuth } from 'hono/basic-auth';
import { getCookie, setCookie } from 'hono/cookie';
import { csrf } from 'hono/csrf';
import type { DashboardEnv } from './context.js';
import type { ResolvedDashboardOptions } from './options.js';

/** Name of the cookie holding the CSRF token (HttpOnly, SameSite=Strict, path = the base path). */
export const CSRF_COOKIE = 'skiplock_csrf';
/** Name of the form field that must repeat the cookie's token in every POST. */
export const CSRF_FIELD = '_csrf';

const TOKEN_FORMAT = /^[A-Za-z0-9_-]{43}$/;

/** Sets the nonce, and on the way out the headers that confine what the page may load and run. */
export function securityHeaders(): MiddlewareHandler<DashboardEnv> {
  return async (c, next) => {
    const nonce = randomBytes(16).toString('base64');
    c.set('nonce', nonce);
    await next();
    c.header(
      'Content-Security-Policy',
      `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    );
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('X-Frame-Options', 'DENY');
    c.header('Referrer-Policy', 'no-referrer');
    c.header('Cache-Control', 'no-store');
  };
}

/** HTTP basic auth on every route when credentials are configured (401 with a realm otherwise). */
export function authGuard(options: ResolvedDashboardOptions): MiddlewareHandler<DashboardEnv> {
  const credentials = options.basicAuth;
  if (!credentials) return async (_, next) => next();
  return basicAuth({ ...credentials, realm: 'skiplock dashboard' });
}

/** In read-only mode every request other than GET/HEAD is refused with 403. */
export function readOnlyGuard(options: ResolvedDashboardOptions): MiddlewareHandler<DashboardEnv> {
  return async (c, next) => {
    if (options.readOnly && c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      return c.text('read-only dashboard: actions are turned off', 403);
    }
    return next();
  };
}

/**
 * CSRF protection for state changes: a POST must come from the dashboard's own
 * origin (Origin / Sec-Fetch-Site, checked by hono's csrf middleware) and carry
 * in its form the token of the `skiplock_csrf` cookie, which another site can
 * neither read nor set. GETs get the cookie when they lack it.
 */
export function csrfGuard(options: ResolvedDashboardOptions): MiddlewareHandler<DashboardEnv>[] {
  const sameOrigin = csrf();
  const token: MiddlewareHandler<DashboardEnv> = async (c, next) => {
    const cookie = getCookie(c, CSRF_COOKIE);
    const current = cookie !== undefined && TOKEN_FORMAT.test(cookie) ? cookie : undefined;
    if (c.req.method === 'GET' || c.req.method === 'HEAD') {
      const value = current ?? randomBytes(32).toString('base64url');
      if (!current) {
        setCookie(c, CSRF_COOKIE, value, {
          path: options.basePath || '/',
          httpOnly: true,
          sameSite: 'Strict',
          secure: new URL(c.req.url).protocol === 'https:',
        });
      }
      c.set('csrfToken', value);
      return next();
    }
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const sent = form[CSRF_FIELD];
    if (!current || typeof sent !== 'string' || !sameToken(sent, current)) {
      return c.text('forbidden: missing or wrong CSRF token (reload the page and try again)', 403);
    }
    c.set('csrfToken', current);
    c.set('form', form);
    return next();
  };
  return [sameOrigin, token];
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
