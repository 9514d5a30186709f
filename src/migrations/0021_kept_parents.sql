-- skiplock migration 21: a parent is kept until its children have started.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0021_kept_parents.sql).
--
-- A job with children that succeeds under the 'delete' or 'archive' success
-- policy is no longer deleted by the statement that ends it: it stays in the
-- jobs table as `succeeded`, with its result and with on_success set to the
-- policy still to apply. The maintenance loop applies it (deletes the row, or
-- moves it to the archive) once none of the job's children is `waiting` or
-- `queued`. This index holds exactly those rows, so the loop finds them
-- without reading the table; no other row ever enters it.

CREATE INDEX jobs_kept_parents_idx ON jobs (id)
  WHERE status = 'succeeded' AND has_children AND on_success IN ('delete', 'archive');
