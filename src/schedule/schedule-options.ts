/**
 * What a schedule is made of, its validation, and the mapping between rows
 * and what callers see. Pure: no I/O.
 */
import { z } from 'zod';
import type { ScheduleRow } from '../db/queries/schedules.js';
import { DEFAULT_QUEUE } from '../job/defaults.js';
import { assertName, serializePayload } from '../job/job.js';
import { int32 } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';
import { type CatchUp, type CronRule, DEFAULT_TIMEZONE, parseCron } from './cron.js';

/** How a schedule treats a slot while its previous job is still queued or running. */
export type Overlap = 'skip' | 'allow';

/** Options of `schedule()`. */
export interface ScheduleOptions extends ClientOption {
  /** IANA time zone the cron expression is read in (`Europe/Berlin`). @default 'UTC' */
  timezone?: string;
  /** Queue of the jobs. @default 'default' */
  queue?: string;
  /** Priority of the jobs; a 32-bit integer, larger runs first. @default 0 */
  priority?: number;
  /**
   * Attempts of each job before the dead letter; an integer ≥ 1. Left out, the
   * jobs leave it out too (the `maxAttempts` of the kind's handler applies).
   * @default the handler's `maxAttempts`, else 20
   */
  maxAttempts?: number;
  /**
   * `'skip'`: no job for a slot while the schedule's previous job is queued or
   * running (no pile-up behind a slow job); `'allow'`: a job for every slot.
   * @default 'skip'
   */
  overlap?: Overlap;
  /**
   * Slots missed while no worker ran (downtime): `'latest'` enqueues the most
   * recent one once; `'all'` enqueues each one at most `catchUpMs` old (with
   * `overlap: 'skip'` only the first of them gets a job); `'none'` enqueues none
   * and waits for the next slot. A slot up to 10 s late is on time, not missed.
   * @default 'latest'
   */
  catchUp?: CatchUp;
  /**
   * How far back `catchUp: 'all'` goes, in milliseconds: an integer from 0 to
   * 315_360_000_000 (10 years; the database refuses more, from any client).
   * @default 86_400_000 (one day)
   */
  catchUpMs?: number;
}

/** A stored schedule, as `schedules()` lists it. */
export interface ScheduleInfo {
  name: string;
  cron: string;
  timezone: string;
  kind: string;
  payload: unknown;
  queue: string;
  priority: number;
  maxAttempts: number;
  overlap: Overlap;
  catchUp: CatchUp;
  catchUpMs: number;
  /** The next slot that will get a job (database clock). */
  nextRunAt: Date;
  /** The slot of the last job this schedule enqueued; null before the first. */
  lastRunAt: Date | null;
  /** Id of the last job this schedule enqueued; null before the first. */
  lastJobId: string | null;
  createdAt: Date;
  updatedAt: Date;
  /**
   * Why the scheduler set this schedule aside, or null while it runs: its cron
   * or time zone does not parse (a row stored by plain SQL, or a time zone this
   * Node.js does not know), its kind or queue is not a usable name, it has no
   * slot left, or the database refused its jobs. A parked schedule enqueues
   * nothing until its row is updated (`schedule()` again, or an UPDATE), which
   * un-parks it.
   */
  parkedReason: string | null;
}

/** The longest `catchUpMs`: 10 years. */
const MAX_CATCH_UP_MS = 315_360_000_000;

/** `schedule()`'s options. */
export const scheduleOptionsSchema = z.strictObject({
  timezone: z.unknown().optional(),
  queue: z.unknown().optional(),
  priority: int32.optional(),
  maxAttempts: z
    .number({ error: 'must be a number' })
    .int({ error: 'must be an integer' })
    .min(1, { error: 'must be ≥ 1' })
    .max(2_147_483_647, { error: 'must fit a 32-bit integer' })
    .optional(),
  overlap: z.enum(['skip', 'allow'], { error: "must be 'skip' or 'allow'" }).optional(),
  catchUp: z.enum(['latest', 'all', 'none'], { error: "must be 'latest', 'all' or 'none'" }).optional(),
  catchUpMs: z
    .number({ error: 'must be a number of milliseconds' })
    .int({ error: 'must be an integer' })
    .min(0, { error: 'must be ≥ 0' })
    .max(MAX_CATCH_UP_MS, { error: 'must be at most 10 years' })
    .optional(),
  client: queryable.optional(),
});

/** A schedule as validated, before its first slot is known. */
export interface ValidSchedule {
  rule: CronRule;
  name: string;
  kind: string;
  payloadJson: string;
  queue: string;
  priority: number;
  /** null when not given (see `NewJob.maxAttempts`). */
  maxAttempts: number | null;
  overlap: Overlap;
  catchUp: CatchUp;
  catchUpMs: number;
}

/**
 * Checks every part of a schedule.
 *
 * @throws {ValidationError} naming the field: `name`, `cron`, `kind`,
 *   `payload.x`, `options.timezone`, `options.queue`…
 */
export function validateSchedule(
  name: unknown,
  cron: unknown,
  kind: unknown,
  payload: unknown,
  options: z.infer<typeof scheduleOptionsSchema>,
): ValidSchedule {
  assertName(name, 'name');
  assertName(kind, 'kind');
  const queue = options.queue === undefined ? DEFAULT_QUEUE : options.queue;
  assertName(queue, 'options.queue');
  const rule = parseCron(cron, options.timezone ?? DEFAULT_TIMEZONE, {
    cron: 'cron',
    timezone: 'options.timezone',
  });
  return {
    rule,
    name,
    kind,
    payloadJson: serializePayload(payload, 'payload'),
    queue,
    priority: options.priority ?? 0,
    maxAttempts: options.maxAttempts ?? null,
    overlap: options.overlap ?? 'skip',
    catchUp: options.catchUp ?? 'latest',
    catchUpMs: options.catchUpMs ?? 86_400_000,
  };
}

/** Maps a row to what callers see; the one place this mapping happens. */
export function toScheduleInfo(row: ScheduleRow): ScheduleInfo {
  return {
    name: row.name,
    cron: row.cron,
    timezone: row.timezone,
    kind: row.kind,
    payload: row.payload,
    queue: row.queue,
    priority: row.priority,
    maxAttempts: row.max_attempts,
    overlap: row.overlap,
    catchUp: row.catch_up,
    catchUpMs: Number(row.catch_up_ms),
    nextRunAt: row.next_run_at,
    lastRunAt: row.last_run_at,
    lastJobId: row.last_job_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    parkedReason: row.parked_reason,
  };
}
