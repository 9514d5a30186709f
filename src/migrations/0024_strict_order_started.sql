-- skiplock migration 24: under strictOrder, a key's jobs that have started
-- before go first, whatever brought them back to `queued`.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0024_strict_order_started.sql).
--
-- "Already ran" was `attempts > 0`: a job waiting to retry. A job given back
-- at a worker's stop, or snoozed, gets its attempt back (attempts 0 on a first
-- attempt), so it went behind its key's later jobs, which then started before
-- it. A job that has been claimed has `lease_seq > 0` (every claim counts it,
-- nothing lowers it), which is what the order now reads: the index, and
-- strict_order_held (otherwise as in migration 22).

DROP INDEX jobs_group_retry_idx;
CREATE INDEX jobs_group_retry_idx
  ON jobs (queue, group_key, priority DESC, run_at, id)
  WHERE status = 'queued' AND group_key IS NOT NULL AND lease_seq > 0;

-- strict_order_held, which reads the order, is in functions/groups.sql.
