/**
 * The worker options that take a number, a choice or a text: their ranges and
 * a one-line help each. The library validates them from here, and the command
 * line builds its `--kebab-case` flags from here, so the two never drift apart.
 */

/** A numeric worker option: a count or a duration in milliseconds, an integer in [min, max]. */
export interface NumberOptionSpec {
  unit: 'count' | 'milliseconds';
  min: number;
  max: number;
  /** One line for `--help`, with the default. */
  help: string;
}

import { MAX_RETENTION_MS } from '../db/queries/prune.js';

/** Longest duration a timer can wait: about 24.8 days. */
export const MAX_TIMER_MS = 2_147_483_647;

/** Numeric worker options by name. */
export const WORKER_NUMBER_OPTIONS = {
  concurrency: { unit: 'count', min: 1, max: 10_000, help: 'handlers running at once (default 10)' },
  batchSize: {
    unit: 'count',
    min: 1,
    max: 10_000,
    help: 'most jobs one claim takes (default: concurrency + prefetch)',
  },
  prefetch: {
    unit: 'count',
    min: 0,
    max: 10_000,
    help: 'jobs claimed ahead of free slots while a backlog waits; 0 turns it off (default: the larger of 4 × concurrency and 500)',
  },
  prefetchTimeoutMs: {
    unit: 'milliseconds',
    min: 10,
    max: MAX_TIMER_MS,
    help: 'a prefetched job not started within this is given back (default 10000)',
  },
  statementTimeoutMs: {
    unit: 'milliseconds',
    min: 100,
    max: MAX_TIMER_MS,
    help: 'client-side deadline of every statement the worker sends (default 30000)',
  },
  pollIntervalMs: {
    unit: 'milliseconds',
    min: 10,
    max: MAX_TIMER_MS,
    help: 'safety-net poll interval (default 2000)',
  },
  visibilityTimeoutMs: {
    unit: 'milliseconds',
    min: 100,
    max: MAX_TIMER_MS,
    help: 'age of a lease after which the sweeper reclaims the job (default 300000)',
  },
  heartbeatIntervalMs: {
    unit: 'milliseconds',
    min: 10,
    max: MAX_TIMER_MS,
    help: 'how often held jobs’ leases are refreshed (default: visibility timeout / 5)',
  },
  sweepIntervalMs: {
    unit: 'milliseconds',
    min: 10,
    max: MAX_TIMER_MS,
    help: 'how often to try reclaiming dead leases (default 60000)',
  },
  retentionMs: {
    unit: 'milliseconds',
    min: 0,
    max: MAX_RETENTION_MS,
    help: 'prune succeeded, failed and cancelled jobs (and archived ones) finished longer ago than this (default: off)',
  },
  pruneIntervalMs: {
    unit: 'milliseconds',
    min: 10,
    max: MAX_TIMER_MS,
    help: 'how often to prune when --retention-ms or a --retention-<status> flag is given (default 60000)',
  },
  maxResultBytes: {
    unit: 'count',
    min: 1,
    max: 268_435_455,
    help: 'largest handler result stored, in bytes of JSON; a larger one fails the attempt (default 1048576)',
  },
  jobTimeoutMs: {
    unit: 'milliseconds',
    min: 1,
    max: MAX_TIMER_MS,
    help: 'handler run time after which the attempt fails (default: none)',
  },
  listenProbeIntervalMs: {
    unit: 'milliseconds',
    min: 100,
    max: MAX_TIMER_MS,
    help: 'how often the LISTEN connection checks that it hears (default 30000)',
  },
  shutdownTimeoutMs: {
    unit: 'milliseconds',
    min: 0,
    max: MAX_TIMER_MS,
    help: 'on stop, how long running handlers may finish before they are aborted and released (default 30000)',
  },
} as const satisfies Record<string, NumberOptionSpec>;

/** Worker options that take one of a few words. */
export const WORKER_CHOICE_OPTIONS = {
  onSuccess: {
    choices: ['delete', 'keep', 'archive'],
    help: 'what happens to a succeeded job (default delete)',
  },
} as const;

/** Worker options that take a text. */
export const WORKER_TEXT_OPTIONS = {
  workerId: { maxLength: 200, help: 'id recorded in locked_by (default: host:pid:random)' },
  listenConnectionString: {
    maxLength: 10_000,
    help: 'a direct URL for the LISTEN connection (behind PgBouncer in transaction mode)',
  },
} as const;

/** Worker options that are on by default; the command line turns each off with `--no-…`. */
export const WORKER_SWITCH_OPTIONS = {
  listen: { help: 'open no LISTEN connection: find jobs by polling only' },
  preparedStatements: {
    help: 'send the claim unnamed from the start (else named until a pooler refuses one)',
  },
  sessionSettings: { help: 'no startup options on the worker’s connections (PgBouncer)' },
  schedules: { help: 'enqueue no schedule (cron) slots from this worker' },
} as const;

/** `camelCase` → `kebab-case`, as the command line spells option names. */
export function kebabCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
