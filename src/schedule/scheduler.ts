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
import type { SkiplockError } from '../errors.js';
import type { MaintenanceService } from '../maintenance/maintainer.js';
import { enqueueUnique } from '../producer/enqueue-unique.js';
import { dueSlots, parseCron } from './cron.js';

/** Longest wait between two looks at the schedules table, in milliseconds. */
export const SCHEDULE_CHECK_MS = 1000;

/** Most schedules one turn handles; the rest are due again at once. */
export const SCHEDULES_PER_TURN = 100;

/** The unique key a schedule with `overlap: 'skip'` gives its jobs. */
export function scheduleUniqueKey(name: string): string {
  return `skiplock:schedule:${name}`;
}

/** What one turn did. */
export interface SchedulerTurn {
  /** Jobs enqueued, one per slot that got a job. */
  enqueued: number;
  /** Milliseconds until the earliest next slot (database clock); null without schedules. */
  untilNextMs: number | null;
}

/**
 * Enqueues every due slot of up to {@link SCHEDULES_PER_TURN} schedules, in the
 * caller's transaction (its row locks make the slots exactly-once). A schedule
 * whose stored rule no longer parses is left alone and reported.
 *
 * @throws {DatabaseError} from the database (the transaction then rolls back: nothing enqueued, nothing advanced).
 */
export async function runDueSchedules(
  db: Queryable,
  queries: JobQueries,
  onError: (error: SkiplockError) => void = () => {},
): Promise<SchedulerTurn> {
  const { rows, now } = await queries.schedules.lockDue(db, SCHEDULES_PER_TURN);
  let enqueued = 0;
  for (const row of rows) {
    let rule: ReturnType<typeof parseCron>;
    try {
      rule = parseCron(row.cron, row.timezone);
    } catch (error) {
      onError(translateError(error));
      continue;
    }
    const due = dueSlots(rule, row.next_run_at, now!, row.catch_up, Number(row.catch_up_ms));
    if (due === null) continue;
    const last = await enqueueSlots(db, queries, row, due.enqueue);
    if (last) enqueued += last.count;
    await queries.schedules.advance(db, row.name, due.nextRunAt, last);
  }
  return { enqueued, untilNextMs: await queries.schedules.untilNext(db) };
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
 * slot is enqueued moments after it comes due; `onTurn` hears of every turn
 * that enqueued jobs.
 */
export function schedulerService(
  queries: JobQueries,
  onError: (error: SkiplockError) => void,
  onTurn: (turn: SchedulerTurn) => void = () => {},
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
      const turn = await runDueSchedules(client, queries, onError);
      const until = turn.untilNextMs;
      nextIntervalMs =
        until === null ? SCHEDULE_CHECK_MS : Math.min(SCHEDULE_CHECK_MS, Math.max(1, Math.ceil(until)));
      if (turn.enqueued > 0) onTurn(turn);
    },
  };
}
