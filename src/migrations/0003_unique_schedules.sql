-- skiplock migration 3: unique keys on jobs, and the schedules table (cron).
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0003_unique_schedules.sql).

-- A unique key is held by at most one job at a time. A job holds its key from
-- its insert while its status stays in its unique_states; the first time its
-- status leaves them (or the row is deleted) the key is free again, and the job
-- never takes it back (a requeued job runs without it). unique_key keeps the
-- key as given, for inspection; unique_lock is the key while it is held, and
-- the one unique index is on it. Plain jobs leave all three NULL.
ALTER TABLE jobs
  ADD COLUMN unique_key    text,
  ADD COLUMN unique_states text[],
  ADD COLUMN unique_lock   text,
  -- A job is inserted queued, so a key it can hold must be held while queued.
  -- NOT VALID: existing rows have no states, so skip scanning them under the
  -- migration's lock; the check holds for every new or updated row.
  ADD CONSTRAINT jobs_unique_states_chk CHECK ('queued' = ANY (unique_states)) NOT VALID;

CREATE UNIQUE INDEX jobs_unique_lock_idx
  ON jobs (unique_lock)
  WHERE unique_lock IS NOT NULL;

-- Any insert with a key (the library, psql, another language) takes the key
-- here, before the unique index is checked, so a plain SQL insert obeys it too.
-- search_path is pinned so a caller's search_path cannot redirect what they call.
CREATE FUNCTION jobs_unique_take() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NEW.unique_key IS NOT NULL THEN
    NEW.unique_states := COALESCE(NEW.unique_states, ARRAY['queued', 'running']);
    NEW.unique_lock := CASE WHEN NEW.status = ANY (NEW.unique_states) THEN NEW.unique_key END;
  ELSE
    NEW.unique_lock := NULL;
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER jobs_unique_take
  BEFORE INSERT ON jobs
  FOR EACH ROW
  WHEN (NEW.unique_key IS NOT NULL OR NEW.unique_lock IS NOT NULL)
  EXECUTE FUNCTION jobs_unique_take();

-- A job whose status leaves its unique_states frees its key. An AFTER trigger
-- with a WHEN clause costs rows without a key only the WHEN test (a BEFORE
-- trigger would lock every updated row once more); only keyed rows pay the
-- second update, which sets no status and so does not fire this again.
CREATE FUNCTION jobs_unique_release() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  EXECUTE pg_catalog.format('UPDATE %I.%I SET unique_lock = NULL WHERE id = $1', TG_TABLE_SCHEMA, TG_TABLE_NAME)
    USING NEW.id;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_unique_release
  AFTER UPDATE OF status ON jobs
  FOR EACH ROW
  WHEN (NEW.unique_lock IS NOT NULL AND NOT (NEW.status = ANY (NEW.unique_states)))
  EXECUTE FUNCTION jobs_unique_release();

-- Recurring jobs: one row per schedule. next_run_at is the next slot not yet
-- enqueued; the scheduler locks a due row (FOR UPDATE SKIP LOCKED), inserts
-- the slot's job and advances next_run_at in one transaction, so each slot is
-- enqueued once however many workers run it.
CREATE TABLE schedules (
  name         text        PRIMARY KEY,
  cron         text        NOT NULL,
  timezone     text        NOT NULL DEFAULT 'UTC',
  kind         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}',
  queue        text        NOT NULL DEFAULT 'default',
  priority     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 20,
  overlap      text        NOT NULL DEFAULT 'skip',
  catch_up     text        NOT NULL DEFAULT 'latest',
  catch_up_ms  bigint      NOT NULL DEFAULT 86400000,
  next_run_at  timestamptz NOT NULL,
  last_run_at  timestamptz,
  last_job_id  bigint,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_overlap_chk CHECK (overlap IN ('skip', 'allow')),
  CONSTRAINT schedules_catch_up_chk CHECK (catch_up IN ('latest', 'all', 'none')),
  CONSTRAINT schedules_catch_up_ms_chk CHECK (catch_up_ms >= 0),
  CONSTRAINT schedules_max_attempts_chk CHECK (max_attempts >= 1)
);

CREATE INDEX schedules_due_idx ON schedules (next_run_at);
