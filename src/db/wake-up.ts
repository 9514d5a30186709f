/**
 * The wake-up message: the one format every NOTIFY of skiplock uses, sent by
 * the SQL function `<schema>.wake_up(channel, type, queue, delay_ms)` (installed
 * by migration 0002, called by the insert trigger and by every statement that
 * makes jobs claimable) and read here. The payload is JSON:
 * `{"type": "insert", "queue": "default", "delayMs": 0}`.
 *
 * Control messages (cancel, pause, resume, limits) share the format; the SQL function
 * `<schema>.control(channel, type, queue, ids)` (migration 0004) adds the ids
 * of the jobs a cancel concerns: `{"type": "cancel", "queue": null,
 * "delayMs": 0, "ids": ["42"]}`.
 */

/**
 * Why a wake-up was sent. Readers treat a type they do not know as a plain
 * wake-up. A `probe` is a listener checking that it hears: it wakes nobody,
 * and carries its sender's token where the queue goes, so that readers that
 * do not know the type take it for a queue nobody has.
 */
export const WAKE_UP_TYPES = [
  'insert',
  'release',
  'requeue',
  'sweep',
  'probe',
  'cancel',
  'pause',
  'resume',
  'limits',
] as const;

/** One of {@link WAKE_UP_TYPES}, or `'unknown'` for a message from a newer version. */
export type WakeUpType = (typeof WAKE_UP_TYPES)[number] | 'unknown';

/** A wake-up: jobs of `queue` (null: any queue) become due in `delayMs` (database clock). */
export interface WakeUp {
  type: WakeUpType;
  queue: string | null;
  delayMs: number;
  /** Ids of the jobs a control message concerns (decimal strings); only on `cancel`. */
  ids?: string[];
}

/**
 * Reads a wake-up payload. Anything unreadable means "some queue, due now", so
 * a malformed message can only cause an extra claim, never a missed job.
 */
export function parseWakeUp(payload: string | undefined): WakeUp {
  try {
    const parsed = JSON.parse(payload ?? '') as {
      type?: unknown;
      queue?: unknown;
      delayMs?: unknown;
      ids?: unknown;
    };
    const type = (WAKE_UP_TYPES as readonly unknown[]).includes(parsed.type)
      ? (parsed.type as WakeUpType)
      : 'unknown';
    const wakeUp: WakeUp = {
      type,
      queue: typeof parsed.queue === 'string' ? parsed.queue : null,
      delayMs: typeof parsed.delayMs === 'number' && parsed.delayMs > 0 ? parsed.delayMs : 0,
    };
    if (Array.isArray(parsed.ids))
      wakeUp.ids = parsed.ids.filter((id): id is string => typeof id === 'string');
    return wakeUp;
  } catch {
    return { type: 'unknown', queue: null, delayMs: 0 };
  }
}

/**
 * SQL that sends one `type` wake-up per distinct queue of `source` (a CTE or
 * subquery with a `queue` column) on the channel bound as `channelParam`, and
 * yields how many were sent. `type` is one of the fixed {@link WAKE_UP_TYPES}.
 */
export function wakeUpQueuesSql(
  wakeUpFunction: string,
  channelParam: string,
  type: 'insert' | 'release' | 'requeue' | 'sweep',
  source: string,
): string {
  return `SELECT ${wakeUpFunction}(${channelParam}, '${type}', q.queue, 0) FROM (SELECT DISTINCT queue FROM ${source}) q`;
}
