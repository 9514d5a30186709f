/**
 * The dashboard's guards: the Host check (DNS rebinding), basic auth with
 * throttled guessing, read-only mode, a bound on request bodies, CSRF
 * (same-origin check plus a double-submit token) and response headers with a
 * per-request nonce, so only the dashboard's own inline script and style run.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';
import { basicAuth } from 'hono/basic-auth';
import { bodyLimit } from 'hono/body-limit';
import { getCookie, setCookie } from 'hono/cookie';
import { csrf } from 'hono/csrf';
import { AuthThrottle } from './auth-throttle.js';
import type { DashboardEnv } from './context.js';
import { normalizeHost, type ResolvedDashboardOptions } from './options.js';

/** Largest request body the dashboard reads, in bytes: its forms send a token and a few short fields. */
export const MAX_BODY_BYTES = 64 * 1024;

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

/**
 * Answers 421 to a request whose `Host` header names a host `accepts` refuses
 * (or is missing or malformed); no check when `accepts` is undefined.
 */
export function hostGuard(accepts: ((host: string) => boolean) | undefined): MiddlewareHandler<DashboardEnv> {
  if (!accepts) return async (_, next) => next();
  return async (c, next) => {
    const host = hostnameOf(c.req.header('host') ?? new URL(c.req.url).host);
    if (host === undefined || !accepts(host)) {
      return c.text(
        `misdirected request: this dashboard does not answer to host ${JSON.stringify(host ?? '')} (allowedHosts, --allowed-host)`,
        421,
      );
    }
    return next();
  };
}

/** The host name of a Host header value (`example.com:4600`, `[::1]:4600`), normalized; undefined when malformed. */
export function hostnameOf(header: string): string | undefined {
  if (header === '' || /[/\\?#@\s]/.test(header)) return undefined;
  try {
    return normalizeHost(new URL(`http://${header}`).hostname);
  } catch {
    return undefined;
  }
}

/**
 * HTTP basic auth on every route when credentials are configured (401 with a
 * realm otherwise). A client (by its address) that failed too often in a
 * minute gets 429 with `Retry-After`, whatever it sends, until the minute ends.
 */
export function authGuard(options: ResolvedDashboardOptions): MiddlewareHandler<DashboardEnv> {
  const credentials = options.basicAuth;
  if (!credentials) return async (_, next) => next();
  const throttle = new AuthThrottle();
  const check = basicAuth({
    realm: 'skiplock dashboard',
    verifyUser: (username, password, c) => {
      // Both compared, always, so the time taken says nothing about which was wrong.
      const right = sameSecret(username, credentials.username) & sameSecret(password, credentials.password);
      if (right) throttle.succeed(clientOf(c));
      else throttle.fail(clientOf(c));
      return right === 1;
    },
  });
  return async (c, next) => {
    const waitMs = throttle.retryAfterMs(clientOf(c));
    if (waitMs > 0) {
      return c.text('too many failed logins: try again later', 429, {
        'Retry-After': String(Math.ceil(waitMs / 1000)),
      });
    }
    return check(c, next);
  };
}

/** The client's address as the socket saw it; one key for all when unknown (a request made in-process). */
function clientOf(c: Context): string {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return incoming?.socket?.remoteAddress ?? 'unknown';
}

/** 1 when equal, else 0, in time that depends on neither value's length. */
function sameSecret(given: string, expected: string): number {
  const hash = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(hash(given), hash(expected)) ? 1 : 0;
}

/** Refuses a request body over {@link MAX_BODY_BYTES} with 413, before anything reads it. */
export function bodyGuard(): MiddlewareHandler<DashboardEnv> {
  return bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: (c) => c.text(`request body too large: at most ${MAX_BODY_BYTES} bytes`, 413),
  });
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
