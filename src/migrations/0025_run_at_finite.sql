-- skiplock migration 25: a job's run_at is an instant, not 'infinity'.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0025_run_at_finite.sql).
--
-- A plain-SQL insert with run_at 'infinity' failed in the wake-up trigger
-- ("cannot subtract infinite timestamps"), which names neither the column nor
-- the rule; the enqueue function and the library already refused it. Rows an
-- UPDATE made infinite before this keep their meaning: 'infinity' (never due)
-- becomes the last instant a JavaScript Date and every driver can read,
-- '-infinity' (due since ever) the job's created_at. NOT VALID: every row
-- complies after the update, so the constraint need not scan the table again
-- under its lock; every new or updated row is checked.
UPDATE jobs
SET run_at = CASE WHEN run_at = 'infinity' THEN timestamptz '9999-12-31 23:59:59.999+00' ELSE created_at END
WHERE NOT isfinite(run_at);

ALTER TABLE jobs ADD CONSTRAINT jobs_run_at_chk CHECK (isfinite(run_at)) NOT VALID;
