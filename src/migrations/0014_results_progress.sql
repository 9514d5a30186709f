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

-- The completion message: the wake-up format with type 'done' and the job's id,
-- on the sibling channel 'skiplock:<schema>:done'. Waiters read the job's state
-- from the table; a job gone from both tables ended by its success. Its
-- search_path holds pg_catalog only, so nothing planted in this schema is called.
CREATE FUNCTION jobs_done_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('skiplock:' || TG_TABLE_SCHEMA || ':done',
                    json_build_object('type', 'done', 'queue', NULL, 'delayMs', 0,
                                      'ids', json_build_array(OLD.id::text))::text);
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_done_update AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN (OLD.awaited AND NEW.status IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_done_notify();

CREATE TRIGGER jobs_done_delete AFTER DELETE ON jobs FOR EACH ROW
  WHEN (OLD.awaited AND OLD.status NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_done_notify();
