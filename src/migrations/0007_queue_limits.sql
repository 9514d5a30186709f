-- skiplock migration 7: global queue limits — at most N running jobs of a
-- queue, and at most COUNT job starts per PERIOD, across all workers.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0007_queue_limits.sql).

-- NULL means no limit. A queue with neither limit is claimed by the ordinary
-- claim; a limited one by a short transaction that locks this row first.
ALTER TABLE queues ADD COLUMN concurrency_limit int;
ALTER TABLE queues ADD COLUMN rate_count int;
ALTER TABLE queues ADD COLUMN rate_period_ms int;
ALTER TABLE queues ADD CONSTRAINT queues_concurrency_limit_chk CHECK (concurrency_limit >= 1);
ALTER TABLE queues ADD CONSTRAINT queues_rate_chk
  CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND rate_count >= 1 AND rate_period_ms >= 1);

-- The rate's sliding log: recent starts, counted per time slot of 1/64 of the
-- period. rate_slot_ends[i] is the end of a slot (ms since the epoch,
-- database clock) and rate_slot_starts[i] the jobs started in it; a slot counts
-- against the rate until its end plus the period has passed, so no window of
-- one period ever holds more than rate_count starts.
ALTER TABLE queues ADD COLUMN rate_slot_ends bigint[] NOT NULL DEFAULT '{}';
ALTER TABLE queues ADD COLUMN rate_slot_starts int[] NOT NULL DEFAULT '{}';
