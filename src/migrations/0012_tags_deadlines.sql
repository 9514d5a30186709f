-- skiplock migration 12: tags on jobs, and start deadlines.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0012_tags_deadlines.sql).

-- tags: labels for finding and acting on jobs together (listJobs, cancel,
-- requeue filter by them); NULL for a job without any. start_by: a job not
-- started by then is never run; the claim skips it and the sweeper ends it
-- cancelled. NULL: no deadline. Nullable columns without a default rewrite no
-- rows, and plain inserts that leave them out cost what they did.
ALTER TABLE jobs
  ADD COLUMN tags text[],
  ADD COLUMN start_by timestamptz,
  -- 1 to 20 tags (no tags is NULL, not '{}'), one dimension, no NULL
  -- element; an instant, not 'infinity'. NOT VALID: the new columns are NULL in every existing row, so
  -- the table is not scanned under the migration's lock; every new or updated
  -- row is checked.
  ADD CONSTRAINT jobs_tags_chk
    CHECK (cardinality(tags) BETWEEN 1 AND 20 AND array_ndims(tags) = 1 AND array_position(tags, NULL) IS NULL)
    NOT VALID,
  ADD CONSTRAINT jobs_start_by_chk CHECK (isfinite(start_by)) NOT VALID;

-- The archive keeps the columns of the jobs table.
ALTER TABLE jobs_archive
  ADD COLUMN tags text[],
  ADD COLUMN start_by timestamptz;

-- Tag filters (`tags @> $1`: jobs having every given tag) go through this
-- index; jobs without tags are not in it.
CREATE INDEX jobs_tags_idx ON jobs USING gin (tags) WHERE tags IS NOT NULL;

-- The sweeper finds expired queued jobs here, oldest deadline first; only jobs
-- with a deadline are in it, so queues without deadlines pay nothing. The
-- claim index is unchanged: the claim tests start_by on the rows it reads.
CREATE INDEX jobs_start_by_idx ON jobs (start_by) WHERE status = 'queued' AND start_by IS NOT NULL;

-- The SQL functions catch up: enqueue takes tags and start_by, requeue and
-- cancel filter by tags (and requeue clears the deadline, as the library's
-- does), and sweep also ends expired queued jobs (functions/sql-api.sql). New
-- arguments come last with NULL defaults, so every existing call (positional
-- or named) means what it did; a changed signature is dropped here (two
-- functions of one name would make calls with fewer arguments ambiguous), so
-- sql/grants.sql, run after every migration, grants it again.
DROP FUNCTION IF EXISTS enqueue(text, jsonb, text, int4, timestamptz, int4,
  text, text[]);
DROP FUNCTION IF EXISTS requeue(int8[], text[], text[], text[], bool);
DROP FUNCTION IF EXISTS cancel(int8[], text[], text[], text[]);
