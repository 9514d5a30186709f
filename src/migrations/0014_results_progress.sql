-- skiplock migration 14: results, progress and logs, and completion messages
-- for jobs someone waits for.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0014_results_progress.sql).
--
-- result:     the handler's return value, written by the success of a job whose
--             row outlives it (onSuccess 'keep' or 'archive').
-- on_success: the job's own success policy; NULL: the worker's.
-- progress:   the handler's last progress value (JSON, bounded by the library).
-- logs:       the handler's newest log lines, a JSON array of {at, line}.
-- awaited:    someone waits for this job (waitFor); only such rows send a
--             completion message, so jobs nobody waits for pay one test of a
--             NULL column in the triggers' WHEN.

ALTER TABLE jobs
  ADD COLUMN result jsonb,
  ADD COLUMN on_success text CONSTRAINT jobs_on_success_check CHECK (on_success IN ('delete', 'keep', 'archive')),
  ADD COLUMN progress jsonb,
  ADD COLUMN logs jsonb,
  ADD COLUMN awaited boolean;

-- The archive is partitioned: columns added to the parent reach every partition.
ALTER TABLE jobs_archive
  ADD COLUMN result jsonb,
  ADD COLUMN on_success text,
  ADD COLUMN progress jsonb,
  ADD COLUMN logs jsonb,
  ADD COLUMN awaited boolean;

-- The completion message of an awaited job (jobs_done_notify, and its two
-- triggers) is in functions/notifications.sql.
