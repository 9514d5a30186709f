/**
 * What every route of the dashboard shares: the Skiplock, its statements, the
 * options, and the per-request values the guards set.
 */
import type pg from 'pg';
import type { Skiplock } from '../skiplock.js';
import type { ResolvedDashboardOptions } from './options.js';
import type { DashboardQueries } from './queries.js';

/** Hono's environment of the dashboard: values the middleware sets per request. */
export interface DashboardEnv {
  Variables: {
    /** Nonce of this response's inline script and style. */
    nonce: string;
    /** The CSRF token forms must send back. */
    csrfToken: string;
    /** The parsed form of a POST that passed the CSRF check. */
    form: Record<string, unknown>;
  };
}

/** Shared by the routes of one dashboard. */
export interface Dashboard {
  skiplock: Skiplock;
  pool: pg.Pool;
  queries: DashboardQueries;
  options: ResolvedDashboardOptions;
  /** A link to a dashboard path (`/jobs`) under the base path. */
  link(path: string): string;
}
