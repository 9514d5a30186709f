-- skiplock migration 16: keyed concurrency — a job's group key (a tenant, an
-- account), and per-queue limits on the jobs of one key: at most N running at
-- once, at most COUNT starts per PERIOD, optionally started strictly in order.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0016_groups.sql).

-- The key; NULL for a job without one. The archive's columns follow the jobs
-- table's.
ALTER TABLE jobs ADD COLUMN group_key text;
ALTER TABLE jobs_archive ADD COLUMN group_key text;
ALTER TABLE jobs ADD CONSTRAINT jobs_group_key_chk CHECK (length(group_key) BETWEEN 1 AND 200);

-- NULL (and strict_order false) means no group limit. A queue with a group
-- limit is claimed by the limited claim's grouped statement.
ALTER TABLE queues ADD COLUMN group_concurrency int;
ALTER TABLE queues ADD COLUMN group_rate_count int;
ALTER TABLE queues ADD COLUMN group_rate_period_ms int;
ALTER TABLE queues ADD COLUMN strict_order boolean NOT NULL DEFAULT false;
-- Where the grouped claim's round-robin walk over the keys stopped last: the
-- next claim starts at the key after it.
ALTER TABLE queues ADD COLUMN group_cursor text;
ALTER TABLE queues ADD CONSTRAINT queues_group_concurrency_chk CHECK (group_concurrency >= 1);
ALTER TABLE queues ADD CONSTRAINT queues_group_rate_chk
  CHECK ((group_rate_count IS NULL) = (group_rate_period_ms IS NULL)
         AND group_rate_count >= 1 AND group_rate_period_ms >= 1);

-- The per-key rate's sliding log: starts of a key counted per time slot of
-- 1/64 of the period (slot_end in ms since the epoch, database clock); a slot
-- counts until its end plus the period has passed. Written only by the grouped
-- claim, under its queue's row lock.
CREATE TABLE group_rate_slots (
  queue     text   NOT NULL,
  group_key text   NOT NULL,
  slot_end  bigint NOT NULL,
  starts    int    NOT NULL,
  PRIMARY KEY (queue, group_key, slot_end)
);

-- The grouped claim walks the keys with queued jobs (a skip scan of this index)
-- and takes each key's first jobs in (priority, run_at, id) order.
CREATE INDEX jobs_group_claim_idx
  ON jobs (queue, group_key, priority DESC, run_at, id)
  WHERE status = 'queued' AND group_key IS NOT NULL;

-- strictOrder: a key's queued jobs that already ran (waiting to retry) go first.
CREATE INDEX jobs_group_retry_idx
  ON jobs (queue, group_key, priority DESC, run_at, id)
  WHERE status = 'queued' AND group_key IS NOT NULL AND attempts > 0;

-- The running jobs of a key, counted against its limit.
CREATE INDEX jobs_group_running_idx
  ON jobs (queue, group_key)
  WHERE status = 'running' AND group_key IS NOT NULL;
