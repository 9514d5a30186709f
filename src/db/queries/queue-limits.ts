/**
 * Queue limits on the queues table: set or remove a queue's concurrency and
 * rate limits and its group limits (telling workers at once), and find which of a worker's queues
 * are limited. The claim of a limited queue is in claim-limited.ts.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** At most `count` job starts of a queue per `periodMs`, across all workers. */
export interface RateLimit {
  /** Most jobs that start within any window of `periodMs`. */
  count: number;
  /** The window, in milliseconds. */
  periodMs: number;
}

/** A queue's limits; null means no limit. */
export interface QueueLimits {
  /** Most jobs of the queue running at once across all workers and hosts. */
  concurrency: number | null;
  /** Most job starts per period across all workers and hosts. */
  rate: RateLimit | null;
  /** Most jobs of one group key running at once across all workers and hosts. */
  groupConcurrency: number | null;
  /** Most job starts of one group key per period across all workers and hosts. */
  groupRate: RateLimit | null;
  /** Whether the jobs of a key start in order, a job waiting to retry holding the ones behind it. */
  strictOrder: boolean;
}

/** What to change: a field left out stays as it is; null removes that limit. */
export interface QueueLimitsChange {
  concurrency?: number | null;
  rate?: RateLimit | null;
  groupConcurrency?: number | null;
  groupRate?: RateLimit | null;
  strictOrder?: boolean;
}

/** The limit columns of a queues row, as selected by {@link LIMIT_COLUMNS}. */
export interface LimitsRow {
  concurrency_limit: number | null;
  rate_count: number | null;
  rate_period_ms: number | null;
  group_concurrency: number | null;
  group_rate_count: number | null;
  group_rate_period_ms: number | null;
  strict_order: boolean | null;
}

/** The limit columns of the queues table, as {@link limitsOf} reads them (`q` is the table's alias). */
export const LIMIT_COLUMNS =
  'q.concurrency_limit, q.rate_count, q.rate_period_ms, q.group_concurrency, q.group_rate_count, q.group_rate_period_ms, q.strict_order';

/** SQL true when the queues row `q` has a group limit. */
export const GROUPED =
  '(q.group_concurrency IS NOT NULL OR q.group_rate_count IS NOT NULL OR q.strict_order)';

/** Reads a row's limit columns. */
export function limitsOf(row: LimitsRow): QueueLimits {
  return {
    concurrency: row.concurrency_limit,
    rate:
      row.rate_count === null || row.rate_period_ms === null
        ? null
        : { count: row.rate_count, periodMs: row.rate_period_ms },
    groupConcurrency: row.group_concurrency,
    groupRate:
      row.group_rate_count === null || row.group_rate_period_ms === null
        ? null
        : { count: row.group_rate_count, periodMs: row.group_rate_period_ms },
    strictOrder: row.strict_order ?? false,
  };
}

/** The queue limit statements. */
export class QueueLimitQueries {
  readonly #set: Statement;
  readonly #limited: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    const { statement, queues } = names;
    this.#channel = names.channel;
    // Removing the rate forgets its log; changing it keeps the starts counted
    // so far. The same for the per-key rate, whose log is a table.
    this.#set = statement(
      'queue_set_limits',
      `WITH saved AS (
         INSERT INTO ${queues} AS q (name, concurrency_limit, rate_count, rate_period_ms,
                                     group_concurrency, group_rate_count, group_rate_period_ms, strict_order, updated_at)
         VALUES ($1, $3::int, $5::int, $6::int, $9::int, $11::int, $12::int, COALESCE($14::boolean, false), now())
         ON CONFLICT (name) DO UPDATE SET
           concurrency_limit = CASE WHEN $2::boolean THEN EXCLUDED.concurrency_limit ELSE q.concurrency_limit END,
           rate_count = CASE WHEN $4::boolean THEN EXCLUDED.rate_count ELSE q.rate_count END,
           rate_period_ms = CASE WHEN $4::boolean THEN EXCLUDED.rate_period_ms ELSE q.rate_period_ms END,
           rate_slot_ends = CASE WHEN $4::boolean AND EXCLUDED.rate_count IS NULL THEN '{}' ELSE q.rate_slot_ends END,
           rate_slot_starts = CASE WHEN $4::boolean AND EXCLUDED.rate_count IS NULL THEN '{}' ELSE q.rate_slot_starts END,
           group_concurrency = CASE WHEN $8::boolean THEN EXCLUDED.group_concurrency ELSE q.group_concurrency END,
           group_rate_count = CASE WHEN $10::boolean THEN EXCLUDED.group_rate_count ELSE q.group_rate_count END,
           group_rate_period_ms = CASE WHEN $10::boolean THEN EXCLUDED.group_rate_period_ms ELSE q.group_rate_period_ms END,
           strict_order = CASE WHEN $13::boolean THEN EXCLUDED.strict_order ELSE q.strict_order END,
           updated_at = now()
         RETURNING ${LIMIT_COLUMNS}, q.name
       ), forgotten AS (
         DELETE FROM ${names.groupRateSlots} WHERE queue = $1 AND $10::boolean AND $11::int IS NULL
       ), told AS (SELECT ${names.wakeUp}($7, 'limits', name, 0) FROM saved)
       SELECT s.*, (SELECT count(*) FROM told) AS told
       FROM saved s`,
    );
    this.#limited = statement(
      'queue_limited',
      `SELECT name FROM ${queues} q
       WHERE name = ANY($1::text[]) AND (concurrency_limit IS NOT NULL OR rate_count IS NOT NULL OR ${GROUPED})
       ORDER BY name`,
    );
  }

  /** Changes `queue`'s limits and tells workers; returns the limits now in force. */
  async set(db: Queryable, queue: string, change: QueueLimitsChange): Promise<QueueLimits> {
    const setConcurrency = change.concurrency !== undefined;
    const setRate = change.rate !== undefined;
    const { rows } = await run<LimitsRow>(db, this.#set, [
      queue,
      setConcurrency,
      change.concurrency ?? null,
      setRate,
      change.rate?.count ?? null,
      change.rate?.periodMs ?? null,
      this.#channel,
      change.groupConcurrency !== undefined,
      change.groupConcurrency ?? null,
      change.groupRate !== undefined,
      change.groupRate?.count ?? null,
      change.groupRate?.periodMs ?? null,
      change.strictOrder !== undefined,
      change.strictOrder ?? null,
    ]);
    return limitsOf(rows[0]!);
  }

  /** Which of `queues` have a limit, by name. */
  async limited(db: Queryable, queues: readonly string[]): Promise<string[]> {
    const { rows } = await run<{ name: string }>(db, this.#limited, [queues]);
    return rows.map((r) => r.name);
  }
}
