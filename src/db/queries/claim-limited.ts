/**
 * The claim of a limited queue (one with a concurrency limit, a rate limit or
 * both): one statement that locks the queue's row, counts the queue's running
 * jobs as they are once the lock is granted, claims at most what the limits
 * leave, and records the starts in the rate's sliding log (queue-room.ts says
 * why the limits hold). A queue with group limits is claimed by the grouped
 * statement (claim-grouped.ts): the claim remembers which statement a queue
 * took last, and a statement sent for the wrong kind of queue claims nothing
 * and says so, so the other is sent at once.
 */
import type pg from 'pg';
import { type Queryable, type Statement, withTransaction } from '../executor.js';
import {
  type ClaimedJob,
  type ClaimRequest,
  type ClaimRow,
  claimedJob,
  KIND_MAX_ATTEMPTS,
  sendClaim,
} from './claim.js';
import { groupedClaimSql } from './claim-grouped.js';
import { claimedCtes, LIMITED_CLAIM_COLUMNS, queueRoomCtes } from './queue-room.js';
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
  /** The queue's only limit is a group concurrency: a worker may claim it ahead of its free slots. */
  prefetchable: boolean;
}

/** The room the limits left, on every row; a claimed job's columns, or NULLs when none was claimed. */
interface LimitedClaimRow extends Omit<ClaimRow, 'id'> {
  concurrency_room: number | null;
  rate_room: number | null;
  rate_wait_ms: string | null;
  grouped: boolean;
  read_committed: boolean;
  prefetchable: boolean | null;
  group_held?: boolean;
  group_rate_wait_ms?: string | null;
  id: string | null;
}

/** A claim's fallback transaction is short; a frozen process must not hold the queue's lock for long. */
const TRANSACTION_TIMEOUT_MS = 10_000;

/** Most queues whose kind of statement (grouped or not) a claim remembers. */
const REMEMBERED_QUEUES = 1000;

/** The statements of the limited claim. */
export class LimitedClaimQueries {
  readonly #claim: Statement;
  readonly #claimGrouped: Statement;
  /** Queues whose last claim found group limits. */
  readonly #grouped = new Set<string>();

  constructor(names: SchemaNames) {
    const { statement, queues, jobs } = names;
    this.#claim = statement(
      'claim_limited',
      `WITH ${queueRoomCtes(names, false)}, picked AS (
         SELECT id FROM ${jobs}
         WHERE status = 'queued' AND queue = $1 AND run_at <= now() AND kind = ANY($5::text[])
           AND (start_by IS NULL OR start_by >= now())
         ORDER BY priority DESC, run_at
         LIMIT (SELECT n FROM take)
         FOR UPDATE SKIP LOCKED
       ), ${claimedCtes(names, KIND_MAX_ATTEMPTS)}, logged AS (
         UPDATE ${queues} u
         SET rate_slot_ends = COALESCE((SELECT array_agg(slot_end ORDER BY slot_end) FROM log), '{}'),
             rate_slot_starts = COALESCE((SELECT array_agg(starts ORDER BY slot_end) FROM log), '{}')
         WHERE u.name = $1 AND u.rate_count IS NOT NULL AND EXISTS (SELECT FROM claimed)
       )
       SELECT ${LIMITED_CLAIM_COLUMNS}
       FROM room r LEFT JOIN claimed c ON true`,
    );
    this.#claimGrouped = statement('claim_grouped', groupedClaimSql(names, KIND_MAX_ATTEMPTS));
  }

  /**
   * Claims up to `request.limit` due jobs of `request.queues[0]` (one queue),
   * within its limits, in one statement (two when the queue's kind changed
   * since its last claim: grouped or not).
   *
   * @throws {DatabaseError} from the database.
   */
  async claim(pool: pg.Pool, request: ClaimRequest): Promise<LimitedClaim> {
    const claim = await this.#send(pool, request);
    if (claim.readCommitted) return claim;
    // The session's default isolation is stricter: claim in a READ COMMITTED transaction instead.
    return withTransaction(pool, (client) => this.#send(client, request), TRANSACTION_TIMEOUT_MS, true);
  }

  /**
   * The same claim on a connection that may be inside the caller's
   * transaction: the queue's lock is then held until that transaction ends.
   * It claims nothing inside a REPEATABLE READ or SERIALIZABLE transaction,
   * whose snapshot would not show the jobs that claims of other workers
   * started.
   *
   * @throws {DatabaseError} from the database.
   */
  async claimIn(db: Queryable, request: ClaimRequest): Promise<LimitedClaim> {
    const { readCommitted: _, ...claim } = await this.#send(db, request);
    return claim;
  }

  async #send(db: Queryable, request: ClaimRequest): Promise<LimitedClaim & { readCommitted: boolean }> {
    const queue = request.queues[0] ?? '';
    const send = <Row>(statement: Statement, values: unknown[]) =>
      sendClaim<Row>(db, request, statement, values);
    const values = [
      queue,
      request.limit,
      request.workerId,
      Math.round(request.visibilityTimeoutMs),
      request.kinds,
      request.kindMaxAttempts?.kinds ?? null,
      request.kindMaxAttempts?.maxAttempts ?? null,
    ];
    const wasGrouped = this.#grouped.has(queue);
    let { rows } = await send<LimitedClaimRow>(wasGrouped ? this.#claimGrouped : this.#claim, values);
    const grouped = rows[0]?.grouped === true;
    if (grouped && !wasGrouped) {
      // The plain statement claimed nothing for a queue with group limits.
      if (this.#grouped.size >= REMEMBERED_QUEUES) this.#grouped.clear();
      this.#grouped.add(queue);
      ({ rows } = await send<LimitedClaimRow>(this.#claimGrouped, values));
    } else if (!grouped && wasGrouped) {
      // The grouped statement claimed right (it keeps every limit); the next claim takes the plain one.
      this.#grouped.delete(queue);
    }
    const first = rows[0];
    const jobs: ClaimedJob[] = [];
    for (const r of rows) {
      if (r.id !== null) jobs.push(claimedJob(r as ClaimRow, request.traceContext));
    }
    return {
      readCommitted: first?.read_committed !== false,
      jobs,
      concurrencyRoom: first?.concurrency_room ?? null,
      rateRoom: first?.rate_room ?? null,
      rateWaitMs: first?.rate_wait_ms == null ? null : Math.max(0, Number(first.rate_wait_ms)),
      groupHeld: first?.group_held === true,
      prefetchable: first?.prefetchable === true,
      groupRateWaitMs:
        first?.group_rate_wait_ms == null ? null : Math.max(0, Number(first.group_rate_wait_ms)),
    };
  }
}
