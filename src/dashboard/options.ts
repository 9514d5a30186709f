/**
 * Options of the dashboard, checked with zod; a bad one is a ValidationError
 * naming the field.
 */
import { z } from 'zod';
import { integerInRange, parseOptions } from '../options.js';
import type { SkiplockMetrics } from '../telemetry/metrics.js';

/** Options of `createDashboard`. */
export interface DashboardOptions {
  /**
   * Path prefix the dashboard is mounted under (`/admin/jobs`): every route and
   * link starts with it. A plain path: `/`-separated segments of letters,
   * digits, `.`, `_`, `~` and `-` (no empty, `.` or `..` segment, no `%`); a
   * trailing `/` is dropped, so `/admin/jobs/` is `/admin/jobs` and `/` is the root.
   * @default '' (the root)
   * @throws {ValidationError} (`options.basePath`) for anything else, such as `//evil.example`.
   */
  basePath?: string;
  /**
   * Host names (or IP addresses) the dashboard answers to, as sent in the
   * `Host` header (without the port). A request naming any other host gets 421:
   * this defends against DNS rebinding, where a page of another site, through a
   * name of its own resolving to your address, reads and drives the dashboard
   * from the visitor's browser. Given to `createDashboard`, only these names
   * are accepted; not given, the host app decides (no check). `serveDashboard`
   * always checks: the address it listens on (every loopback name for a
   * loopback address; any IP address for `0.0.0.0` or `::`) plus these names.
   * @default none
   * @example ['jobs.example.com']
   */
  allowedHosts?: string[];
  /** Show no actions and refuse every POST with 403. @default false */
  readOnly?: boolean;
  /** Require HTTP basic auth with these credentials on every route (401 otherwise). @default none */
  basicAuth?: { username: string; password: string };
  /**
   * `/metrics` in Prometheus text: `true` makes gauges of this Skiplock on first
   * scrape (needs prom-client), a `SkiplockMetrics` serves those, `false` turns the
   * route off. @default true
   */
  metrics?: boolean | SkiplockMetrics;
  /** How often open pages refresh their data, in milliseconds; 0 turns live refresh off. @default 5000 */
  refreshIntervalMs?: number;
  /** Jobs per page of the jobs list, 1–500. @default 50 */
  pageSize?: number;
}

/** The options with their defaults applied. */
export interface ResolvedDashboardOptions {
  basePath: string;
  /** Lower-case names, or undefined: no Host check of its own. */
  allowedHosts: string[] | undefined;
  readOnly: boolean;
  basicAuth: { username: string; password: string } | undefined;
  metrics: boolean | SkiplockMetrics;
  refreshIntervalMs: number;
  pageSize: number;
}

/** `/`-separated segments of unreserved characters, none empty, `.` or `..`. */
const PLAIN_PATH = /^(\/(?!\.\.?(?:\/|$))[A-Za-z0-9._~-]+)+$/;

/** A host name or IP address as a Host header carries it, without port; IPv6 with or without brackets. */
const HOST_NAME = /^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?$|^\[?[0-9A-Fa-f:.]+\]?$/;

const schema = z.strictObject({
  basePath: z
    .string({ error: 'must be a string' })
    .refine((v) => v === '' || v === '/' || PLAIN_PATH.test(v.replace(/\/$/, '')), {
      error:
        "must be '' or a plain path such as /admin/jobs (segments of letters, digits, '.', '_', '~', '-'; none empty, '.' or '..')",
    })
    .optional(),
  allowedHosts: z
    .array(
      z
        .string({ error: 'must be a string' })
        .max(253, { error: 'must be at most 253 characters' })
        .refine((v) => HOST_NAME.test(v), { error: 'must be a host name or IP address, without port' }),
      { error: 'must be an array of host names' },
    )
    .optional(),
  readOnly: z.boolean({ error: 'must be a boolean' }).optional(),
  basicAuth: z
    .strictObject(
      {
        username: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }),
        password: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }),
      },
      { error: 'must be { username, password }' },
    )
    .refine((v) => !v.username.includes(':'), { error: 'username must not contain ":"' })
    .optional(),
  metrics: z
    .union(
      [z.boolean(), z.custom<SkiplockMetrics>((v) => typeof (v as SkiplockMetrics)?.text === 'function')],
      { error: 'must be a boolean or the result of createMetrics' },
    )
    .optional(),
  refreshIntervalMs: z
    .number({ error: 'must be a number of milliseconds' })
    .int({ error: 'must be an integer' })
    .refine((v) => v === 0 || (v >= 500 && v <= 3_600_000), { error: 'must be 0 or 500–3600000' })
    .optional(),
  pageSize: integerInRange(1, 500).optional(),
});

/**
 * Checks the options and applies their defaults.
 *
 * @throws {ValidationError} naming the field (`options.basePath`…).
 */
export function resolveDashboardOptions(options: DashboardOptions): ResolvedDashboardOptions {
  const parsed = parseOptions(schema, options, 'options');
  return {
    basePath: (parsed.basePath ?? '').replace(/\/$/, ''),
    allowedHosts: parsed.allowedHosts?.map(normalizeHost),
    readOnly: parsed.readOnly ?? false,
    basicAuth: parsed.basicAuth,
    metrics: parsed.metrics ?? true,
    refreshIntervalMs: parsed.refreshIntervalMs ?? 5000,
    pageSize: parsed.pageSize ?? 50,
  };
}

/** A host as compared: lower case, without IPv6 brackets or a trailing dot. */
export function normalizeHost(host: string): string {
  return host
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '');
}
