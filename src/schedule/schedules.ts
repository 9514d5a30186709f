/**
 * Creating, removing and listing schedules: the front door behind
 * `skiplock.schedule`, `unschedule` and `schedules`. Workers enqueue the slots
 * (see scheduler.ts).
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import { ValidationError } from '../errors.js';
import { assertName, assertPayloadSize, DEFAULT_MAX_PAYLOAD_BYTES } from '../job/job.js';
import { parseOptions } from '../options.js';
import { type ClientOption, clientOrPool } from '../producer/job-options.js';
import {
  type ScheduleInfo,
  type ScheduleOptions,
  scheduleOptionsSchema,
  toScheduleInfo,
  validateSchedule,
} from './schedule-options.js';

/**
 * Creates the schedule `name`, or updates it. A new schedule (or a new cron or
 * time zone) starts at its first slot after the database's now; other changes
 * keep the slot it waits for.
 *
 * @throws {ValidationError} naming the field (`payload` when its JSON is larger than
 *   `maxPayloadBytes`); nothing is stored.
 * @throws {DatabaseError} from the database.
 */
export async function schedule(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  cron: unknown,
  kind: unknown,
  payload: unknown,
  options: ScheduleOptions,
  maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES,
): Promise<ScheduleInfo> {
  const parsed = parseOptions(scheduleOptionsSchema, options, 'options');
  const valid = validateSchedule(name, cron, kind, payload, parsed);
  // Every slot enqueues this payload: it is held to the enqueue's bound.
  assertPayloadSize(valid.payloadJson, 'payload', maxPayloadBytes);
  const db = parsed.client ?? pool;
  const now = await queries.schedules.now(db);
  const nextRunAt = valid.rule.next(now);
  // parseCron refused rules that never fire; this one has no slot left after now.
  if (nextRunAt === null) throw new ValidationError('cron', 'has no slot after now');
  const row = await queries.schedules.upsert(db, {
    ...valid,
    cron: valid.rule.cron,
    timezone: valid.rule.timezone,
    nextRunAt,
  });
  return toScheduleInfo(row);
}

/**
 * Removes the schedule `name`; jobs it already enqueued stay.
 *
 * @returns true when the schedule existed.
 * @throws {ValidationError} (field `name`) for an empty or unstorable name.
 */
export async function unschedule(
  queries: JobQueries,
  pool: pg.Pool,
  name: unknown,
  options: ClientOption,
): Promise<boolean> {
  const db = clientOrPool(pool, options);
  assertName(name, 'name');
  return queries.schedules.remove(db, name);
}

/** Every schedule, by name, with its next slot. */
export async function listSchedules(
  queries: JobQueries,
  pool: pg.Pool,
  options: ClientOption,
): Promise<ScheduleInfo[]> {
  return (await queries.schedules.list(clientOrPool(pool, options))).map(toScheduleInfo);
}
