-- skiplock migration 11: schedule rows the scheduler cannot use are parked, and
-- the database bounds what a schedule row may hold.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0011_schedule_bounds.sql).

-- Why the scheduler set this schedule aside (its cron or time zone does not
-- parse, it names no usable kind or queue, or it has no slot left); NULL while
-- it runs. A parked row is never due, so it cannot keep a scheduler busy. Any
-- update that does not set this column itself (schedule(), or a plain UPDATE
-- that fixes the row) clears it, and the scheduler tries the row again.
ALTER TABLE schedules ADD COLUMN parked_reason text;

-- search_path is pinned so a caller's search_path cannot redirect what it calls.
CREATE FUNCTION schedules_unpark() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  NEW.parked_reason := NULL;
  RETURN NEW;
END
$$;

CREATE TRIGGER schedules_unpark
  BEFORE UPDATE ON schedules
  FOR EACH ROW
  WHEN (OLD.parked_reason IS NOT NULL AND NEW.parked_reason IS NOT DISTINCT FROM OLD.parked_reason)
  EXECUTE FUNCTION schedules_unpark();

-- Rows stored by plain SQL before these bounds existed are brought inside them,
-- so the constraints below hold for every row.
UPDATE schedules SET catch_up_ms = 315360000000 WHERE catch_up_ms > 315360000000;
UPDATE schedules SET next_run_at = now() WHERE NOT isfinite(next_run_at);
UPDATE schedules SET last_run_at = NULL WHERE NOT isfinite(last_run_at);

-- catchUpMs goes back at most 10 years, as schedule() accepts; a slot is a
-- real instant (not 'infinity'), so the scheduler can count from it.
ALTER TABLE schedules
  ADD CONSTRAINT schedules_catch_up_ms_max_chk CHECK (catch_up_ms <= 315360000000),
  ADD CONSTRAINT schedules_next_run_at_chk CHECK (isfinite(next_run_at)),
  ADD CONSTRAINT schedules_last_run_at_chk CHECK (isfinite(last_run_at));
