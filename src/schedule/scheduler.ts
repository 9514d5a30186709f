/**
 * The scheduler: a maintenance service that enqueues the due slots of every
 * schedule. One transaction locks due schedule rows (FOR UPDATE SKIP LOCKED),
 * inserts each slot's job (run_at = the slot) and advances the row's next
 * slot, so a slot gets one job however many workers, hosts and clocks there
 * are. Slots are judged by the database's now(), so none runs early.
 */
import type { Queryable } from '../db/executor.js';
import { translateError } from '../db/executor.js';
import type { NewJob } from '../db/queries/insert.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { ScheduleRow } from '../db/queries/schedules.js';
import { DatabaseError, SkiplockError } from '../errors.js';
import { assertName } from '../job/job.js';
import type { MaintenanceService } from '../maintenance/maintainer.js';
import { enqueueUnique } from '../producer/enqueue-unique.js';
import { type DueSlots, dueSlots, parseCron } from './cron.js';

/** Longest wait between two looks at the schedules table, in milliseconds. */
export const SCHEDULE_CHECK_MS = 1000;

/** Most schedules one turn handles; the rest are due again at once. */
export const SCHEDULES_PER_TURN = 100;

/**
 * Jobs one turn enqueues before it gives each further due schedule one slot
 * only; after a turn that reached it (a catch-up), the next turn waits
 * {@link SCHEDULE_CHECK_MS}. So a catch-up proceeds at about this many jobs a
 * second and never holds back the other schedules' slots.
 */
export const MAX_JOBS_PER_TURN = 1000;

/** The unique key a schedule with `overlap: 'skip'` gives its jobs. */
export function scheduleUniqueKey(name: string): string {
  return `skiplock:schedule:${name}`;
}

/** A schedule the scheduler set aside, and why. */
export interface ParkedSchedule {
  name: string;
  reason: string;
}

/** What one turn did. */
export interface SchedulerTurn {
  /** Jobs enqueued, one per slot that got a job. */
  enqueued: number;
  /** Schedules parked by this turn. */
  parked: ParkedSchedule[];
  /** Milliseconds until the earliest next slot (database clock); null without schedules. */
  untilNextMs: number | null;
}

/**
 * Enqueues every due slot of up to {@link SCHEDULES_PER_TURN} schedules, in the
 * caller's transaction (its row locks make the slots exactly-once). A row the
 * scheduler cannot use (its cron or time zone does not parse, its kind or
 * queue is not a usable name, no slot is left, the database refuses its jobs)
 * is parked: not due again until the row is updated.
 *
 * @throws {DatabaseError} from the database (the transaction then rolls back: nothing enqueued, nothing advanced).
 */
export async function runDueSchedules(db: Queryable, queries: JobQueries): Promise<SchedulerTurn> {
  const { rows, now } = await queries.schedules.lockDue(db, SCHEDULES_PER_TURN);
  let enqueued = 0;
  const parked: ParkedSchedule[] = [];
  const park = async (name: string, reason: string) => {
    await queries.schedules.park(db, name, reason);
    parked.push({ name, reason });
  };
  for (const row of rows) {
    const budget = Math.max(1, MAX_JOBS_PER_TURN - enqueued);
    const due = dueSlotsOf(row, now!, budget);
    if (typeof due === 'string') {
      await park(row.name, due);
      continue;
    }
    try {
      enqueued += await queries.schedules.underSavepoint(db, async () => {
        const last = await enqueueSlots(db, queries, row, due.enqueue);
        await queries.schedules.advance(db, row.name, due.nextRunAt, last);
        return last?.count ?? 0;
      });
    } catch (error) {
      const translated = translateError(error);
      if (!isBadRowError(translated)) throw translated;
      await park(row.name, `the database refused its jobs: ${translated.message}`);
    }
  }
  return { enqueued, parked, untilNextMs: await queries.schedules.untilNext(db) };
}

/** The row's due slots, or why the row cannot be scheduled. */
function dueSlotsOf(row: ScheduleRow, now: Date, limit: number): DueSlots | string {
  try {
    assertName(row.name, 'name');
    assertName(row.kind, 'kind');
    assertName(row.queue, 'queue');
    const rule = parseCron(row.cron, row.timezone);
    const due = dueSlots(rule, row.next_run_at, now, row.catch_up, Number(row.catch_up_ms), limit);
    return due ?? `invalid cron: has no slot after ${row.next_run_at.toISOString()}`;
  } catch (error) {
    return error instanceof SkiplockError ? error.message : String(error);
  }
}

/**
 * A data exception (22) or integrity violation (23): this row's jobs, not the
 * database, are at fault. A unique violation (23505) is a race with another
 * insert, worth the next turn's try.
 */
function isBadRowError(error: SkiplockError): boolean {
  const state = error instanceof DatabaseError ? (error.sqlState ?? '') : '';
  return /^2[23]/.test(state) && state !== '23505';
}

/** Inserts the jobs of `slots`; returns the last one inserted and how many. */
async function enqueueSlots(
  db: Queryable,
  queries: JobQueries,
  row: ScheduleRow,
  slots: readonly Date[],
): Promise<{ runAt: Date; jobId: string; count: number } | undefined> {
  if (slots.length === 0) return undefined;
  const jobOf = (slot: Date): NewJob => ({
    kind: row.kind,
    queue: row.queue,
    payloadJson: JSON.stringify(row.payload),
    priority: row.priority,
    runAt: slot,
    delayMs: null,
    maxAttempts: row.max_attempts_default ? null : row.max_attempts,
  });
  if (row.overlap === 'skip') {
    // One job at a time: later slots of this turn would only be its duplicates.
    const slot = slots[0]!;
    const unique = { key: scheduleUniqueKey(row.name), statesText: '{queued,running}', replace: false };
    const [job] = await enqueueUnique(queries, db, [{ ...jobOf(slot), unique }]);
    return job && !job.duplicate ? { runAt: slot, jobId: job.id, count: 1 } : undefined;
  }
  const inserted = await queries.insert.many(db, slots.map(jobOf));
  const lastJob = inserted.at(-1)!;
  return { runAt: slots.at(-1)!, jobId: lastJob.id, count: inserted.length };
}

/**
 * The scheduler as a maintenance service. Between turns it waits until the
 * earliest next slot (database clock), at most {@link SCHEDULE_CHECK_MS}, so a
 * slot is enqueued moments after it comes due; after a turn that enqueued
 * {@link MAX_JOBS_PER_TURN} jobs it waits the full interval. `onTurn` hears of
 * every turn that enqueued jobs; `onParked` of each schedule parked, once (the
 * parked row is not due again until it is updated).
 */
export function schedulerService(
  queries: JobQueries,
  onParked: (parked: ParkedSchedule) => void,
  onTurn: (turn: SchedulerTurn) => void = () => {},
): MaintenanceService {
  return turnsService((client) => runDueSchedules(client, queries), onParked, onTurn);
}

/**
 * {@link schedulerService} around any turn: the waiting rule between turns,
 * apart from the statements (its loop timing is tested with a fake clock).
 */
export function turnsService(
  turn: (client: Queryable) => Promise<SchedulerTurn>,
  onParked: (parked: ParkedSchedule) => void,
  onTurn: (turn: SchedulerTurn) => void,
): MaintenanceService {
  // The maintainer reads intervalMs once after each turn. After a turn of its
  // own it waits for the next slot; after one another process took (the lock
  // was held), it waits the full check interval, not a stale short one.
  let nextIntervalMs = SCHEDULE_CHECK_MS;
  return {
    name: 'schedule',
    get intervalMs() {
      const intervalMs = nextIntervalMs;
      nextIntervalMs = SCHEDULE_CHECK_MS;
      return intervalMs;
    },
    async run(client) {
      const done = await turn(client);
      const until = done.untilNextMs;
      nextIntervalMs =
        until === null || done.enqueued >= MAX_JOBS_PER_TURN
          ? SCHEDULE_CHECK_MS
          : Math.min(SCHEDULE_CHECK_MS, Math.max(1, Math.ceil(until)));
      for (const parked of done.parked) onParked(parked);
      if (done.enqueued > 0) onTurn(done);
    },
  };
}
