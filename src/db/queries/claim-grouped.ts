/**
 * The claim statement of a grouped queue (one with `groupConcurrency`,
 * `groupRate` or `strictOrder`), run by the limited claim after it locked the
 * queue's row. It keeps the queue's own limits (as the limited statement does)
 * and, per group key, at most `group_concurrency` running jobs and
 * `group_rate_count` starts per period, taking the keys round-robin: the walk
 * over the keys starts after the key where the last claim's walk stopped (the
 * queue's `group_cursor`), and within a claim every key's first job comes
 * before any key's second. A key's backlog never starves the others.
 *
 * Why the limits hold across workers: every claim of the queue first locks the
 * queue's row, so grouped claims of one queue run one after another, and this
 * statement's snapshot (taken after the lock was granted) sees every claim
 * committed before it. Nothing else makes a job of the queue running: the
 * ordinary claim skips grouped queues. Anything else only lowers a key's
 * running count (a finish, the sweeper reclaiming a crashed worker's lease), so
 * a crashed worker's slots come back with its leases, with no state to clean.
 */
import type { SchemaNames } from './schema-names.js';

/** Slots per group rate period in the per-key sliding log. */
const GROUP_RATE_SLOTS_PER_PERIOD = 64;

/**
 * How many of the queue's first queued jobs (in claim order) are looked at for
 * jobs without a group key: each runs as a key of its own, once the grouped
 * jobs queued ahead of it are within this reach.
 */
const UNKEYED_REACH = 256;

/**
 * The grouped claim's SQL. Parameters as the limited claim's: $1 queue, $2
 * most jobs, $3 worker id, $4 visibility timeout (ms), $5 kinds, $6/$7 the
 * kinds' max attempts. Returns the limited claim's columns, `group_held`: a
 * key had more due jobs than its limits (or the claim's size) let it start,
 * so a freed slot may start them, and `group_rate_wait_ms`: when the first
 * counted start of such a key leaves its rate's window (null: none counted).
 */
export function groupedClaimSql(
  names: SchemaNames,
  rateSlotsPerPeriod: number,
  kindMaxAttempts: string,
): string {
  const { queues, jobs, groupRateSlots } = names;
  // A key's first jobs, in order: those already tried (waiting to retry) come
  // first under strictOrder, and a job not yet due, or of a kind this worker
  // does not run, holds every job behind it. A job past its start deadline is
  // never claimed (the sweeper ends it), and holds nothing.
  const keyOrder = 'o.retry DESC, o.priority DESC, o.run_at, o.id';
  // A key's room and whether its limits held jobs back, as an array: what
  // this claim may take at most, less what its limits leave (running jobs,
  // starts within the rate's period), and no more than its due jobs of the
  // worker's kinds (an upper bound under strictOrder); held (1) when it has
  // more due jobs than that. The subqueries that compute it end in OFFSET 0,
  // so that the planner does not copy (and run) it once per use of its result.
  const keyState = (key: string) => `(
     SELECT ARRAY[least(c.cap, x.due), (x.due > c.cap)::int]
     FROM (SELECT least(
       t.n,
       CASE WHEN q.group_concurrency IS NULL THEN t.n ELSE greatest(q.group_concurrency - (
         SELECT count(*) FROM ${jobs} r
         WHERE r.queue = $1 AND r.group_key = ${key} AND r.status = 'running'), 0) END,
       CASE WHEN q.group_rate_count IS NULL THEN t.n ELSE greatest(q.group_rate_count - (
         SELECT COALESCE(sum(s.starts), 0) FROM ${groupRateSlots} s
         WHERE s.queue = $1 AND s.group_key = ${key} AND s.slot_end + q.group_period_ms > q.at_ms), 0) END
     )::int AS cap) c,
     LATERAL (SELECT count(*)::int AS due FROM (SELECT FROM ${jobs} d
                WHERE d.queue = $1 AND d.status = 'queued' AND d.group_key = ${key}
                  AND d.run_at <= now() AND d.kind = ANY($5::text[])
                  AND (d.start_by IS NULL OR d.start_by >= now())
                LIMIT c.cap + 1) z) x)`;
  return `WITH RECURSIVE q AS (
     SELECT paused, concurrency_limit, rate_count, rate_period_ms::bigint AS period_ms,
            rate_slot_ends, rate_slot_starts,
            group_concurrency, group_rate_count, group_rate_period_ms::bigint AS group_period_ms, strict_order,
            group_cursor,
            floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS at_ms,
            greatest(1, ceil(rate_period_ms / ${rateSlotsPerPeriod}.0))::bigint AS slot_ms,
            greatest(1, ceil(group_rate_period_ms / ${GROUP_RATE_SLOTS_PER_PERIOD}.0))::bigint AS group_slot_ms
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
   ), take AS (
     SELECT CASE WHEN paused THEN 0
                 ELSE least($2::int, COALESCE(concurrency_room, $2::int), COALESCE(rate_room, $2::int)) END AS n
     FROM room
   ), walk AS (
     -- The keys with queued jobs, round-robin: from the key after the last
     -- claim's cursor, wrapping around once, until the keys visited have room
     -- for what this claim may take. Each step is a probe of the group claim
     -- index, and a key's room is its limits less its running jobs and recent starts.
     SELECT w.group_key, 1 AS step, w.group_key AS first, w.state[1] AS room, w.state[2] = 1 AS held,
            w.state[1] AS total
     FROM (SELECT f.group_key, ${keyState('f.group_key')} AS state
           FROM (SELECT COALESCE(
                   (SELECT j.group_key FROM ${jobs} j
                    WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL AND j.group_key > q.group_cursor
                    ORDER BY j.group_key LIMIT 1),
                   (SELECT j.group_key FROM ${jobs} j
                    WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL
                    ORDER BY j.group_key LIMIT 1)) AS group_key
                 FROM q) f, q, take t
           WHERE f.group_key IS NOT NULL AND t.n > 0
           OFFSET 0) w
     UNION ALL
     SELECT nx.group_key, w.step + 1, w.first, nx.state[1], nx.state[2] = 1, w.total + nx.state[1]
     FROM walk w, q, take t, LATERAL (
       SELECT k.group_key, ${keyState('k.group_key')} AS state
       FROM (SELECT COALESCE(
               (SELECT j.group_key FROM ${jobs} j
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL AND j.group_key > w.group_key
                ORDER BY j.group_key LIMIT 1),
               (SELECT j.group_key FROM ${jobs} j
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL
                ORDER BY j.group_key LIMIT 1)) AS group_key) k
       OFFSET 0
     ) nx
     WHERE w.total < t.n AND nx.group_key <> w.first
   ), key_room AS (
     SELECT group_key, step, room, held FROM walk
   ), candidates AS (
     SELECT c.id, c.rank, kr.step, c.priority, c.run_at
     FROM key_room kr, q, LATERAL (
       SELECT o.id, o.priority, o.run_at, row_number() OVER (ORDER BY o.priority DESC, o.run_at, o.id) AS rank
       FROM (SELECT j.id, j.priority, j.run_at FROM ${jobs} j
             WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key = kr.group_key
               AND j.run_at <= now() AND j.kind = ANY($5::text[])
               AND (j.start_by IS NULL OR j.start_by >= now())
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT kr.room) o
     ) c
     WHERE kr.room > 0 AND NOT q.strict_order
     UNION ALL
     SELECT c.id, c.rank, kr.step, c.priority, c.run_at
     FROM key_room kr, q, LATERAL (
       SELECT s.id, s.priority, s.run_at, s.rank
       FROM (
         SELECT o.id, o.priority, o.run_at,
                row_number() OVER (ORDER BY ${keyOrder}) AS rank,
                bool_and(o.run_at <= now() AND o.kind = ANY($5::text[])) OVER (ORDER BY ${keyOrder}) AS ready
         FROM ((SELECT j.id, j.priority, j.run_at, j.kind, true AS retry FROM ${jobs} j
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key = kr.group_key AND j.attempts > 0
                  AND (j.start_by IS NULL OR j.start_by >= now())
                ORDER BY j.priority DESC, j.run_at, j.id LIMIT kr.room)
               UNION ALL
               (SELECT j.id, j.priority, j.run_at, j.kind, false FROM ${jobs} j
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key = kr.group_key AND j.attempts = 0
                  AND (j.start_by IS NULL OR j.start_by >= now())
                ORDER BY j.priority DESC, j.run_at, j.id LIMIT kr.room)) o
       ) s
       WHERE s.ready AND s.rank <= kr.room
     ) c
     WHERE kr.room > 0 AND q.strict_order
     UNION ALL
     SELECT u.id, 1, 0, u.priority, u.run_at
     FROM (SELECT j.id, j.priority, j.run_at, j.group_key, j.kind FROM ${jobs} j
           WHERE j.queue = $1 AND j.status = 'queued' AND j.run_at <= now()
             AND (j.start_by IS NULL OR j.start_by >= now())
           ORDER BY j.priority DESC, j.run_at
           LIMIT ${UNKEYED_REACH}) u
     WHERE u.group_key IS NULL AND u.kind = ANY($5::text[])
   ), picked AS (
     SELECT j.id FROM ${jobs} j
     WHERE j.id = ANY(ARRAY(
             SELECT id FROM candidates ORDER BY rank, step, priority DESC, run_at, id LIMIT (SELECT n FROM take)))
       AND j.status = 'queued' AND (j.start_by IS NULL OR j.start_by >= now())
     FOR UPDATE SKIP LOCKED
   ), claimed AS (
     UPDATE ${jobs} j
     SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
         locked_by = $3, visibility_timeout_ms = $4, ${kindMaxAttempts}
     WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
     RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
               j.lease_seq, j.created_at, j.on_success, j.trace_context::text AS trace_context, j.group_key
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
     -- One update of the queue's row: the rate's log, and where the walk stopped.
     UPDATE ${queues} u
     SET rate_slot_ends = CASE WHEN u.rate_count IS NOT NULL AND EXISTS (SELECT FROM claimed)
                          THEN COALESCE((SELECT array_agg(slot_end ORDER BY slot_end) FROM log), '{}')
                          ELSE u.rate_slot_ends END,
         rate_slot_starts = CASE WHEN u.rate_count IS NOT NULL AND EXISTS (SELECT FROM claimed)
                            THEN COALESCE((SELECT array_agg(starts ORDER BY slot_end) FROM log), '{}')
                            ELSE u.rate_slot_starts END,
         group_cursor = COALESCE((SELECT group_key FROM walk ORDER BY step DESC LIMIT 1), u.group_cursor)
     WHERE u.name = $1 AND ((u.rate_count IS NOT NULL AND EXISTS (SELECT FROM claimed)) OR EXISTS (SELECT FROM walk))
   ), group_logged AS (
     INSERT INTO ${groupRateSlots} AS s (queue, group_key, slot_end, starts)
     SELECT $1, c.group_key, (q.at_ms / q.group_slot_ms + 1) * q.group_slot_ms, count(*)::int
     FROM claimed c, q
     WHERE q.group_rate_count IS NOT NULL AND c.group_key IS NOT NULL
     GROUP BY c.group_key, q.at_ms, q.group_slot_ms
     ON CONFLICT (queue, group_key, slot_end) DO UPDATE SET starts = s.starts + EXCLUDED.starts
   ), group_expired AS (
     DELETE FROM ${groupRateSlots} s USING q
     WHERE s.queue = $1 AND (q.group_rate_count IS NULL OR s.slot_end + q.group_period_ms <= q.at_ms)
   )
   SELECT r.concurrency_room, r.rate_room,
          (SELECT (SELECT min(slot_end) FROM log) + q.period_ms - q.at_ms FROM q) AS rate_wait_ms,
          EXISTS (SELECT FROM key_room WHERE held) AS group_held,
          (SELECT min(s.slot_end + q.group_period_ms - q.at_ms)
           FROM ${groupRateSlots} s, q
           WHERE s.queue = $1 AND s.slot_end + q.group_period_ms > q.at_ms
             AND s.group_key IN (SELECT group_key FROM key_room WHERE held)) AS group_rate_wait_ms,
          c.id, c.queue, c.kind, c.payload, c.priority, c.run_at, c.attempts, c.max_attempts,
          c.lease_seq, c.created_at, c.trace_context
   FROM room r LEFT JOIN claimed c ON true`;
}
