/**
 * The claim of a limited queue (one with a concurrency limit, a rate limit or
 * both): a short transaction that first locks the queue's row, then — in a
 * second statement, whose snapshot sees every claim committed before the lock
 * was granted — counts the queue's running jobs, claims at most what the
 * limits leave, and records the starts in the rate's sliding log. One
 * statement could not do it: under READ COMMITTED its snapshot would be taken
 * before the lock wait, and it would count stale running jobs. A queue with
 * group limits is claimed by the grouped statement (claim-grouped.ts).
 */
import type pg from 'pg';
import { type Queryable, run, runPrepared, type Statement, withTransaction } from '../executor.js';
import { type ClaimedJob, type ClaimRequest, type ClaimRow, claimedJob, KIND_MAX_ATTEMPTS } from './claim.js';
import { groupedClaimSql } from './claim-grouped.js';
import { GROUPED } from './queue-limits.js';
import type { SchemaNames } from './schema-names.js';

/** What one limited claim took, and what the limits left. */
export interface LimitedClaim {
  jobs: ClaimedJob[];
  /** Jobs the concurrency limit allowed to start (null: no concurrency limit). */
  concurrencyRoom: number | null;
  /** Starts the rate allowed (null: no rate limit). */
  rateRoom: number | null;
  /** Milliseconds until the rate's oldest counted start expires (null: no rate limit or no start counted). */
  rateWaitMs: number | null;
  /** A group key of the queue had queued jobs but no room (its group concurrency or rate): a freed slot may start them. */
  groupHeld: boolean;
  /** Milliseconds until a start of a key held by its group rate leaves the rate's window (null: none). */
  groupRateWaitMs: number | null;
}

/** The room the limits left, on every row; a claimed job's columns, or NULLs when none was claimed. */
interface LimitedClaimRow extends Omit<ClaimRow, 'id'> {
  concurrency_room: number | null;
  rate_room: number | null;
  rate_wait_ms: string | null;
  group_held?: boolean;
  group_rate_wait_ms?: string | null;
  id: string | null;
}

/** A claim's transaction is a few milliseconds; a frozen process must not hold the queue's lock for long. */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 10_000;

/** Slots per rate period in the sliding log: starts are counted per 1/64 of the period. */
const RATE_SLOTS_PER_PERIOD = 64;

/** The statements of the limited claim. */
export class LimitedClaimQueries {
  readonly #lock: Statement;
  readonly #claim: Statement;
  readonly #claimGrouped: Statement;

  constructor(names: SchemaNames) {
    const { statement, queues, jobs } = names;
    // Every claim of the queue waits here for the one before it to commit.
    // It also says whether the queue has group limits, read under the lock.
    this.#lock = statement(
      'claim_limited_lock',
      `SELECT ${GROUPED} AS grouped FROM ${queues} q WHERE name = $1 FOR UPDATE`,
    );
    // statement_timestamp(), not now(): it is read after the lock was granted,
    // so the log's times grow with the order of the claims.
    this.#claim = statement(
      'claim_limited',
      `WITH q AS (
         SELECT paused, concurrency_limit, rate_count, rate_period_ms::bigint AS period_ms,
                rate_slot_ends, rate_slot_starts,
                floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS at_ms,
                greatest(1, ceil(rate_period_ms / ${RATE_SLOTS_PER_PERIOD}.0))::bigint AS slot_ms
         FROM ${queues} WHERE name = $1
       ), live AS (
         SELECT s.slot_end, s.starts
         FROM q, unnest(q.rate_slot_ends, q.rate_slot_starts) AS s (slot_end, starts)
         WHERE q.rate_count IS NOT NULL AND s.slot_end + q.period_ms > q.at_ms
       ), room AS (
         SELECT COALESCE(q.paused, false) AS paused,
                CASE WHEN q.concurrency_limit IS NOT NULL THEN greatest(q.concurrency_limit - (
                  SELECT count(*) FROM ${jobs}
                  WHERE queue = $1 AND status = 'running' AND locked_at IS NOT NULL), 0)::int END AS concurrency_room,
                CASE WHEN q.rate_count IS NOT NULL
                  THEN greatest(q.rate_count - (SELECT COALESCE(sum(starts), 0) FROM live), 0)::int END AS rate_room
         FROM (SELECT) one LEFT JOIN q ON true
       ), picked AS (
         SELECT id FROM ${jobs}
         WHERE status = 'queued' AND queue = $1 AND run_at <= now() AND kind = ANY($5::text[])
           AND (start_by IS NULL OR start_by >= now())
         ORDER BY priority DESC, run_at
         LIMIT (SELECT CASE WHEN paused THEN 0
                            ELSE least($2::int, COALESCE(concurrency_room, $2::int), COALESCE(rate_room, $2::int)) END
                FROM room)
         FOR UPDATE SKIP LOCKED
       ), claimed AS (
         UPDATE ${jobs} j
         SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
             locked_by = $3, visibility_timeout_ms = $4, ${KIND_MAX_ATTEMPTS}
         WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
         RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
                   j.lease_seq, j.created_at, j.on_success, j.trace_context::text AS trace_context
       ), log AS (
         SELECT slot_end, sum(starts)::int AS starts
         FROM (
           SELECT slot_end, starts FROM live
           UNION ALL
           SELECT (q.at_ms / q.slot_ms + 1) * q.slot_ms, (SELECT count(*) FROM claimed)::int
           FROM q WHERE q.rate_count IS NOT NULL
         ) e
         GROUP BY slot_end HAVING sum(starts) > 0
       ), logged AS (
         UPDATE ${queues} u
         SET rate_slot_ends = COALESCE((SELECT array_agg(slot_end ORDER BY slot_end) FROM log), '{}'),
             rate_slot_starts = COALESCE((SELECT array_agg(starts ORDER BY slot_end) FROM log), '{}')
         WHERE u.name = $1 AND u.rate_count IS NOT NULL AND EXISTS (SELECT FROM claimed)
       )
       SELECT r.concurrency_room, r.rate_room,
              (SELECT (SELECT min(slot_end) FROM log) + q.period_ms - q.at_ms FROM q) AS rate_wait_ms,
              c.id, c.queue, c.kind, c.payload, c.priority, c.run_at, c.attempts, c.max_attempts,
              c.lease_seq, c.created_at, c.on_success, c.trace_context
       FROM room r LEFT JOIN claimed c ON true`,
    );
    this.#claimGrouped = statement(
      'claim_grouped',
      groupedClaimSql(names, RATE_SLOTS_PER_PERIOD, KIND_MAX_ATTEMPTS),
    );
  }

  /**
   * Claims up to `request.limit` due jobs of `request.queues[0]` (one queue),
   * within its limits, in one short transaction.
   *
   * @throws {DatabaseError} from the database.
   */
  async claim(pool: pg.Pool, request: ClaimRequest): Promise<LimitedClaim> {
    // READ COMMITTED whatever the session's default: the claim must see the claims committed during the lock wait.
    return withTransaction(
      pool,
      (client) => this.claimIn(client, request),
      IDLE_IN_TRANSACTION_TIMEOUT_MS,
      true,
    );
  }

  /**
   * The same claim on a connection already inside the caller's transaction:
   * the queue's lock is held until that transaction ends.
   *
   * @throws {DatabaseError} from the database.
   */
  async claimIn(db: Queryable, request: ClaimRequest): Promise<LimitedClaim> {
    const queue = request.queues[0];
    // A prepared statement needs a pg connection (the worker's); other callers send unnamed ones.
    const send = <Row>(statement: Statement, values: unknown[]) =>
      request.prepared === false
        ? run<Row>(db, statement, values)
        : runPrepared<Row>(db as Pick<pg.Pool, 'query'>, statement, values);
    const lock = await send<{ grouped: boolean }>(this.#lock, [queue]);
    const grouped = lock.rows[0]?.grouped === true;
    const { rows } = await send<LimitedClaimRow>(grouped ? this.#claimGrouped : this.#claim, [
      queue,
      request.limit,
      request.workerId,
      Math.round(request.visibilityTimeoutMs),
      request.kinds,
      request.kindMaxAttempts?.kinds ?? null,
      request.kindMaxAttempts?.maxAttempts ?? null,
    ]);
    const first = rows[0];
    const jobs: ClaimedJob[] = [];
    for (const r of rows) {
      if (r.id !== null) jobs.push(claimedJob(r as ClaimRow, request.traceContext));
    }
    return {
      jobs,
      concurrencyRoom: first?.concurrency_room ?? null,
      rateRoom: first?.rate_room ?? null,
      rateWaitMs: first?.rate_wait_ms == null ? null : Math.max(0, Number(first.rate_wait_ms)),
      groupHeld: first?.group_held === true,
      groupRateWaitMs:
        first?.group_rate_wait_ms == null ? null : Math.max(0, Number(first.group_rate_wait_ms)),
    };
  }
}
