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
   * link starts with it. Starts with `/`, no trailing `/`. @default '' (the root)
   */
  basePath?: string;
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
  readOnly: boolean;
  basicAuth: { username: string; password: string } | undefined;
  metrics: boolean | SkiplockMetrics;
  refreshIntervalMs: number;
  pageSize: number;
}

const schema = z.strictObject({
  basePath: z
    .string({ error: 'must be a string' })
    .refine((v) => v === '' || (/^\/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$/.test(v) && !v.endsWith('/')), {
      error: "must be '' or a path starting with / and not ending with /",
    })
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
    basePath: parsed.basePath ?? '',
    readOnly: parsed.readOnly ?? false,
    basicAuth: parsed.basicAuth,
    metrics: parsed.metrics ?? true,
    refreshIntervalMs: parsed.refreshIntervalMs ?? 5000,
    pageSize: parsed.pageSize ?? 50,
  };
}
