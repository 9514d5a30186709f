/**
 * The claim statement of a grouped queue (one with `groupConcurrency`,
 * `groupRate` or `strictOrder`), sent by the limited claim. It keeps the
 * queue's own limits (as the limited statement does) and, per group key, at
 * most `group_concurrency` running jobs and `group_rate_count` starts per
 * period, taking the keys round-robin: the walk over the keys starts after the
 * key where the last claim's walk stopped (the queue's `group_cursor`), and
 * within a claim every key's first job comes before any key's second. A key's
 * backlog never starves the others.
 *
 * Why the limits hold across workers: the statement locks the queue's row
 * first, so grouped claims of one queue run one after another, and it counts
 * a key's running jobs and recent starts, and checks a key's order, with
 * functions that read what is committed once the lock is granted
 * (queue-room.ts). Nothing else makes a job of the queue running: the
 * ordinary claim skips grouped queues. Anything else only lowers a key's
 * running count (a finish, the sweeper reclaiming a crashed worker's lease), so
 * a crashed worker's slots come back with its leases, with no state to clean.
 */
import { claimedCtes, LIMITED_CLAIM_COLUMNS, queueRoomCtes } from './queue-room.js';
import type { SchemaNames } from './schema-names.js';

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
export function groupedClaimSql(names: SchemaNames, kindMaxAttempts: string): string {
  const { queues, jobs, groupRateSlots, quoted } = names;
  // A key's first jobs, in order: those that started before (waiting to
  // retry, snoozed, given back at a stop) come first under strictOrder
  // (migration 24), and a job not yet due, or of a kind this worker
  // does not run, holds every job behind it. A job past its start deadline is
  // never claimed (the sweeper ends it), and holds nothing.
  const keyOrder = 'o.retry DESC, o.priority DESC, o.run_at, o.id';
  // A key's room and whether its limits held jobs back, as an array: what
  // this claim may take at most, less what its limits leave (running jobs,
  // starts within the rate's period), and no more than its due jobs of the
  // worker's kinds (an upper bound under strictOrder); held (1) when it has
  // more due jobs than that. The due jobs are counted in the group claim
  // index's order, so that the planner reads that index (the key's entries),
  // not the queue's claim index filtered by key.
  const keyState = (key: string) => `(
     SELECT ARRAY[least(c.cap, x.due), (x.due > c.cap)::int]
     FROM (SELECT least(
       t.n,
       CASE WHEN q.group_concurrency IS NULL THEN t.n
         ELSE greatest(q.group_concurrency - ${quoted}.group_running_jobs($1, ${key}), 0) END,
       CASE WHEN q.group_rate_count IS NULL THEN t.n
         ELSE greatest(q.group_rate_count
                       - ${quoted}.group_recent_starts($1, ${key}, q.at_ms - q.group_period_ms), 0) END
     )::int AS cap) c,
     LATERAL (SELECT count(*)::int AS due FROM (SELECT FROM ${jobs} d
                WHERE d.queue = $1 AND d.status = 'queued' AND d.group_key = ${key}
                  AND d.run_at <= now() AND d.kind = ANY($5::text[])
                  AND (d.start_by IS NULL OR d.start_by >= now())
                ORDER BY d.priority DESC, d.run_at, d.id
                LIMIT c.cap + 1) z) x)`;
  // The key with queued jobs after `after` in key order, wrapping around to the first.
  const nextKey = (after: string) => `(SELECT COALESCE(
       (SELECT j.group_key FROM ${jobs} j
        WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL AND j.group_key > ${after}
        ORDER BY j.group_key LIMIT 1),
       (SELECT j.group_key FROM ${jobs} j
        WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key IS NOT NULL
        ORDER BY j.group_key LIMIT 1)) AS group_key OFFSET 0)`;
  return `WITH RECURSIVE ${queueRoomCtes(names, true)}, walk AS (
     -- The keys with queued jobs, round-robin: from the key after the last
     -- claim's cursor, wrapping around once, until the keys visited have room
     -- for what this claim may take. Each step is a probe of the group claim
     -- index, and a key's room is its limits less its running jobs and recent
     -- starts. The key and its state are computed once per step (OFFSET 0
     -- keeps the planner from copying them into every use).
     SELECT f.group_key, 1 AS step, f.group_key AS first, s.state[1] AS room, s.state[2] = 1 AS held,
            s.state[1] AS total
     FROM q, take t, LATERAL ${nextKey('q.group_cursor')} f,
          LATERAL (SELECT ${keyState('f.group_key')} AS state OFFSET 0) s
     WHERE f.group_key IS NOT NULL AND t.n > 0
     UNION ALL
     SELECT k.group_key, w.step + 1, w.first, s.state[1], s.state[2] = 1, w.total + s.state[1]
     FROM walk w, q, take t, LATERAL ${nextKey('w.group_key')} k,
          LATERAL (SELECT ${keyState('k.group_key')} AS state OFFSET 0) s
     WHERE w.total < t.n AND k.group_key <> w.first
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
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key = kr.group_key AND j.lease_seq > 0
                  AND (j.start_by IS NULL OR j.start_by >= now())
                ORDER BY j.priority DESC, j.run_at, j.id LIMIT kr.room)
               UNION ALL
               (SELECT j.id, j.priority, j.run_at, j.kind, false FROM ${jobs} j
                WHERE j.queue = $1 AND j.status = 'queued' AND j.group_key = kr.group_key AND j.lease_seq = 0
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
     -- Every condition again, as the job is now (a row changed since the
     -- snapshot is re-read when locked); under strictOrder, whether a job of
     -- its key before it waits, read once it is locked, as the key's jobs are
     -- now. Each candidate is locked through its primary key: with one
     -- \`id = ANY(…)\` over the table, a planner whose statistics predate a
     -- large enqueue read the whole claim index instead.
     SELECT l.id FROM q, unnest(ARRAY(
              SELECT id FROM candidates ORDER BY rank, step, priority DESC, run_at, id LIMIT (SELECT n FROM take)
            )) AS c(id),
          LATERAL (SELECT j.id, j.group_key FROM ${jobs} j
                   WHERE j.id = c.id AND j.status = 'queued' AND j.run_at <= now() AND j.kind = ANY($5::text[])
                     AND (j.start_by IS NULL OR j.start_by >= now())
                   FOR UPDATE OF j SKIP LOCKED) l
     WHERE NOT (q.strict_order AND l.group_key IS NOT NULL
                AND ${quoted}.strict_order_held($1, l.group_key, l.id, $5::text[]))
   ), ${claimedCtes(names, kindMaxAttempts)}, logged AS (
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
     SELECT $1, c.group_key, (t.ms / q.group_slot_ms + 1) * q.group_slot_ms, count(*)::int
     FROM claimed c, q, claimed_at t
     WHERE q.group_rate_count IS NOT NULL AND c.group_key IS NOT NULL
     GROUP BY c.group_key, t.ms, q.group_slot_ms
     ON CONFLICT (queue, group_key, slot_end) DO UPDATE SET starts = s.starts + EXCLUDED.starts
   ), group_expired AS (
     DELETE FROM ${groupRateSlots} s USING q
     WHERE s.queue = $1 AND (q.group_rate_count IS NULL OR s.slot_end + q.group_period_ms <= q.at_ms)
   )
   SELECT ${LIMITED_CLAIM_COLUMNS},
          EXISTS (SELECT FROM key_room WHERE held) AS group_held,
          (SELECT min(s.slot_end + q.group_period_ms - q.at_ms)
           FROM ${groupRateSlots} s, q
           WHERE s.queue = $1 AND s.slot_end + q.group_period_ms > q.at_ms
             AND s.group_key IN (SELECT group_key FROM key_room WHERE held)) AS group_rate_wait_ms
   FROM room r LEFT JOIN claimed c ON true LEFT JOIN candidates k ON k.id = c.id
   -- In the walk's order, so that a worker starts the jobs it buffers round-robin too.
   ORDER BY k.rank, k.step, c.priority DESC, c.run_at, c.id`;
}
