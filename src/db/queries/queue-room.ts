/**
 * The parts the limited and the grouped claim statements share: the lock on
 * the queue's row, what its limits leave (the room), the update that claims
 * the picked jobs, and the queue's rate log.
 *
 * Why one statement keeps the limits across workers: the statement first
 * locks the queue's row, so claims of one queue run one after another. Its
 * snapshot was taken before that wait, so it does not count on it: the
 * running jobs are counted by functions that read with a snapshot of their
 * own, taken after the lock was granted (see migration 22), the rate's log and
 * the group cursor are read from the locked row (always its newest version),
 * and a job the snapshot still saw queued is re-checked when it is locked
 * (`FOR UPDATE` re-reads a row changed since), so a job claimed by the claim
 * before is skipped.
 */
import { epochMs } from './claim.js';
import { GROUPED } from './queue-limits.js';
import type { SchemaNames } from './schema-names.js';

/** Slots per rate period in the sliding logs: starts are counted per 1/64 of the period. */
export const RATE_SLOTS_PER_PERIOD = 64;

/**
 * SQL true when the queue `q` may be claimed ahead of a worker's free slots: its
 * only limit is a group concurrency. A buffered job holds its key's slot as a
 * running one does, and starts soon. A queue concurrency would let one
 * worker's buffer take the queue's slots from the others, a rate would count
 * starts that happen later, and under strictOrder a buffered job given back
 * goes behind the key's later jobs (a give-back dates it now).
 */
const PREFETCHABLE = `(q.group_concurrency IS NOT NULL AND q.concurrency_limit IS NULL AND q.rate_count IS NULL
     AND q.group_rate_count IS NULL AND NOT q.strict_order)`;

/**
 * The CTEs `locked` (the queue's row, locked), `q` (its limits, the time and
 * its running jobs, read after the lock), `live` (the rate log's slots within
 * the period) and `room` (what the concurrency and rate limits leave; NULL:
 * no such limit), and `take`: how many jobs this claim may take at most ($2,
 * less what the limits leave; 0 while paused, outside READ COMMITTED (where
 * the counting functions would read the transaction's old snapshot; the
 * caller retries in a READ COMMITTED transaction), and in the statement for queues
 * without group limits, 0 when the queue has them: the caller then sends the
 * grouped statement). Ends without a trailing comma.
 */
export function queueRoomCtes(names: SchemaNames, forGroups: boolean): string {
  const { queues, quoted } = names;
  // clock_timestamp(), evaluated after the lock: the log's times grow with the order of the claims.
  return `locked AS (
     SELECT name, paused, concurrency_limit, rate_count, rate_period_ms, rate_slot_ends, rate_slot_starts,
            group_concurrency, group_rate_count, group_rate_period_ms, strict_order, group_cursor
     FROM ${queues} WHERE name = $1 FOR UPDATE
   ), q AS (
     SELECT paused, concurrency_limit, rate_count, rate_period_ms::bigint AS period_ms,
            rate_slot_ends, rate_slot_starts,
            group_concurrency, group_rate_count, group_rate_period_ms::bigint AS group_period_ms, strict_order,
            group_cursor, ${GROUPED} AS grouped,
            CASE WHEN concurrency_limit IS NOT NULL THEN ${quoted}.queue_running_jobs(name) END AS running,
            floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS at_ms,
            greatest(1, ceil(rate_period_ms / ${RATE_SLOTS_PER_PERIOD}.0))::bigint AS slot_ms,
            greatest(1, ceil(group_rate_period_ms / ${RATE_SLOTS_PER_PERIOD}.0))::bigint AS group_slot_ms
     FROM locked q
   ), live AS (
     SELECT s.slot_end, s.starts
     FROM q, unnest(q.rate_slot_ends, q.rate_slot_starts) AS s (slot_end, starts)
     WHERE q.rate_count IS NOT NULL AND s.slot_end + q.period_ms > q.at_ms
   ), room AS (
     SELECT COALESCE(q.paused, false) AS paused, COALESCE(q.grouped, false) AS grouped,
            current_setting('transaction_isolation') = 'read committed' AS read_committed,
            COALESCE(${PREFETCHABLE}, false) AS prefetchable,
            CASE WHEN q.concurrency_limit IS NOT NULL
              THEN greatest(q.concurrency_limit - q.running, 0)::int END AS concurrency_room,
            CASE WHEN q.rate_count IS NOT NULL
              THEN greatest(q.rate_count - (SELECT COALESCE(sum(starts), 0) FROM live), 0)::int END AS rate_room
     FROM (SELECT) one LEFT JOIN q ON true
   ), take AS (
     SELECT CASE WHEN paused OR NOT read_committed${forGroups ? '' : ' OR grouped'} THEN 0
                 ELSE least($2::int, COALESCE(concurrency_room, $2::int), COALESCE(rate_room, $2::int)) END AS n
     FROM room
   )`;
}

/**
 * The CTEs `claimed` (the jobs of `picked` made running: $3 worker id, $4
 * visibility timeout in ms, `kindMaxAttempts` the SET item of the kinds'
 * maxAttempts), `claimed_at` (when they were: `ms`, and how many: `n`) and
 * `log` (the queue's rate log with this claim's starts).
 */
export function claimedCtes(names: SchemaNames, kindMaxAttempts: string): string {
  const { jobs } = names;
  return `claimed AS (
     UPDATE ${jobs} j
     SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
         locked_by = $3, visibility_timeout_ms = $4, ${kindMaxAttempts}
     WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
     RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
               j.lease_seq, j.created_at, j.on_success, j.trace_context::text AS trace_context, j.group_key
   ), claimed_at AS (
     -- When the claimed rows were written (read once they all were): the rate
     -- logs date this claim's starts by it, not by the time the claim began
     -- (a long walk over the keys would date them early, and free their
     -- slots early).
     SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms, n
     FROM (SELECT count(*)::int AS n FROM claimed) c
   ), log AS (
     SELECT slot_end, sum(starts)::int AS starts
     FROM (
       SELECT slot_end, starts FROM live
       UNION ALL
       SELECT (t.ms / q.slot_ms + 1) * q.slot_ms, t.n
       FROM q, claimed_at t WHERE q.rate_count IS NOT NULL
     ) e
     GROUP BY slot_end HAVING sum(starts) > 0
   )`;
}

/** The columns every row of a limited claim returns: the room, the rate's wait, and a claimed job's (`c`). */
export const LIMITED_CLAIM_COLUMNS = `r.concurrency_room, r.rate_room, r.grouped, r.read_committed, r.prefetchable,
   (SELECT (SELECT min(slot_end) FROM log) + q.period_ms - q.at_ms FROM q) AS rate_wait_ms,
   c.id, c.queue, c.kind, c.payload, c.priority, ${epochMs('c.run_at')} AS run_at_ms, c.attempts,
   c.max_attempts, c.lease_seq, ${epochMs('c.created_at')} AS created_at_ms, c.on_success, c.trace_context`;
