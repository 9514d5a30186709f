/**
 * Cron rules: parsed by croner (never by hand) in an IANA time zone, and the
 * next-slot rule the scheduler follows. Pure: no I/O, no clock of its own —
 * every instant comes in as an argument (the database's clock).
 *
 * Daylight saving: a slot in the skipped hour runs once, at the first valid
 * instant after it (`30 2 * * *` in Europe/Berlin runs at 03:00 on the spring
 * day); a slot at a fixed time in the repeated hour runs once, at its first
 * occurrence. A rule with a wildcard hour (`0 * * * *`) keeps its interval:
 * one slot per elapsed hour, the repeated hour included.
 */
import { Cron } from 'croner';
import { ValidationError } from '../errors.js';

/** The time zone of a schedule given none. */
export const DEFAULT_TIMEZONE = 'UTC';

/** A parsed cron rule in one time zone. */
export interface CronRule {
  readonly cron: string;
  readonly timezone: string;
  /** The first slot strictly after `after`, or null when the rule never fires again. */
  next(after: Date): Date | null;
  /** The last slot strictly before `before`, or null when there is none. */
  previous(before: Date): Date | null;
}

/**
 * Parses a cron expression: 5 fields (minute precision) or 6 (seconds first),
 * or a nickname such as `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
 *
 * @param fields - names for errors (`cron`, `options.timezone`).
 * @throws {ValidationError} naming the field: an expression croner refuses, one
 *   that never fires, or a time zone that is not an IANA name.
 */
export function parseCron(
  cron: unknown,
  timezone: unknown,
  fields: { cron: string; timezone: string } = { cron: 'cron', timezone: 'timezone' },
): CronRule {
  assertTimezone(timezone, fields.timezone);
  if (typeof cron !== 'string' || cron.trim().length === 0)
    throw new ValidationError(fields.cron, 'must be a non-empty cron expression');
  const text = cron.trim();
  const parts = text.split(/\s+/).length;
  if (!text.startsWith('@') && parts !== 5 && parts !== 6)
    throw new ValidationError(
      fields.cron,
      `must have 5 or 6 fields (or be a nickname such as @hourly), got ${parts}`,
    );
  let rule: Cron;
  try {
    rule = new Cron(text, { timezone, mode: '5-or-6-parts', paused: true });
  } catch (error) {
    throw new ValidationError(fields.cron, (error as Error).message.replace(/^CronPattern: /, ''));
  }
  if (rule.nextRun(new Date(0)) === null) throw new ValidationError(fields.cron, 'never fires');
  return {
    cron: text,
    timezone,
    next: (after) => rule.nextRun(after),
    previous: (before) => rule.previousRuns(1, before)[0] ?? null,
  };
}

/**
 * Checks an IANA time zone name (`Europe/Berlin`, `UTC`).
 *
 * @throws {ValidationError} naming `field` for anything the runtime does not know.
 */
export function assertTimezone(timezone: unknown, field: string): asserts timezone is string {
  if (typeof timezone !== 'string' || timezone.length === 0)
    throw new ValidationError(field, 'must be an IANA time zone name such as Europe/Berlin');
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    throw new ValidationError(field, `unknown time zone ${JSON.stringify(timezone)}`);
  }
}

/** Most slots one scheduler turn enqueues for one schedule; the rest wait for the next turn. */
export const MAX_SLOTS_PER_TURN = 1000;

/** What to do with the due slots of one schedule at one instant. */
export interface DueSlots {
  /** Slots to enqueue, oldest first. */
  enqueue: Date[];
  /** The schedule's next slot after this turn. */
  nextRunAt: Date;
}

/** How a schedule treats slots missed while no scheduler ran. */
export type CatchUp = 'latest' | 'all' | 'none';

/**
 * A slot seen at most this late counts as on time, and `catchUp: 'none'` still
 * enqueues it; a later one was missed. Covers a busy scheduler, not downtime.
 */
export const ON_TIME_MS = 10_000;

/**
 * The slots due at `now` from `nextRunAt` (the first slot not yet enqueued), and
 * the next slot after them:
 * - `'latest'`: the most recent due slot, once;
 * - `'all'`: every due slot at most `catchUpMs` old (up to `limit`, default
 *   {@link MAX_SLOTS_PER_TURN}, per turn);
 * - `'none'`: the most recent due slot only if it is at most {@link ON_TIME_MS} late.
 *
 * @returns null when the rule never fires again after `nextRunAt`.
 */
export function dueSlots(
  rule: CronRule,
  nextRunAt: Date,
  now: Date,
  catchUp: CatchUp,
  catchUpMs: number,
  limit = MAX_SLOTS_PER_TURN,
): DueSlots | null {
  if (nextRunAt.getTime() > now.getTime()) return { enqueue: [], nextRunAt };
  if (catchUp !== 'all') {
    // The most recent slot at or before now; it is at or after nextRunAt, a due slot.
    const latest = rule.previous(new Date(now.getTime() + 1)) ?? nextRunAt;
    const next = rule.next(latest);
    if (next === null) return null;
    const onTime = now.getTime() - latest.getTime() <= ON_TIME_MS;
    return { enqueue: catchUp === 'latest' || onTime ? [latest] : [], nextRunAt: next };
  }
  const oldest = now.getTime() - catchUpMs;
  let slot: Date | null = nextRunAt.getTime() >= oldest ? nextRunAt : rule.next(new Date(oldest - 1));
  const enqueue: Date[] = [];
  while (slot !== null && slot.getTime() <= now.getTime() && enqueue.length < limit) {
    enqueue.push(slot);
    slot = rule.next(slot);
  }
  if (slot === null) return null;
  return { enqueue, nextRunAt: slot };
}
