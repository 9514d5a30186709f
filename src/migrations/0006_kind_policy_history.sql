-- skiplock migration 6: per-kind attempt limits, and the history of failed attempts.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0006_kind_policy_history.sql).

-- true when the producer left max_attempts out: the row holds the default (20)
-- until a worker whose handler gives its kind a maxAttempts claims it and sets
-- that instead. false (what an INSERT that does not name the column gets) means
-- max_attempts was given and always wins. Requeue keeps it.
ALTER TABLE jobs
  ADD COLUMN max_attempts_default boolean NOT NULL DEFAULT false,
  -- Failed attempts, oldest first, the newest 20 kept: a JSON array of
  -- {"attempt": int, "error": text, "at": timestamptz, "worker": text}. NULL
  -- until the first failure; requeue keeps it.
  ADD COLUMN errors jsonb;

-- The archive keeps the columns of the jobs table.
ALTER TABLE jobs_archive
  ADD COLUMN max_attempts_default boolean NOT NULL DEFAULT false,
  ADD COLUMN errors jsonb;

-- A schedule made without maxAttempts enqueues jobs that leave it out too.
ALTER TABLE schedules
  ADD COLUMN max_attempts_default boolean NOT NULL DEFAULT false;
