-- skiplock migration 25: the claim index ends with the job id.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0025_claim_order_id.sql).
--
-- The relay publishes a queue's jobs in the order priority DESC, run_at, id
-- (a group key's jobs depend on it). Without the id in the index, every claim
-- read and sorted all of the queue's due jobs: a backlog of 20,000 cost 7 ms a
-- claim, and the cost grew with the backlog. With it, a claim reads its batch
-- from the index. Workers' claims (priority DESC, run_at) read a prefix of the
-- same index, as before. The index holds queued jobs only, so building it locks
-- writes to the jobs table for as long as it takes to index the queued rows.

CREATE INDEX jobs_claim_order_idx
  ON jobs (queue, priority DESC, run_at, id)
  WHERE status = 'queued';
DROP INDEX jobs_claim_idx;
ALTER INDEX jobs_claim_order_idx RENAME TO jobs_claim_idx;
