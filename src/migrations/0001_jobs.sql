-- skiplock migration 1: the jobs table, and what the engine needs.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0001_jobs.sql).

-- The jobs table: columns, defaults and the status CHECK.
CREATE TABLE jobs (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  kind         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}',
  status       text        NOT NULL DEFAULT 'queued',
  priority     int         NOT NULL DEFAULT 0,
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 20,
  locked_at    timestamptz,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT jobs_status_chk
    CHECK (status IN ('queued','running','succeeded','failed','dead')),
  -- Added by skiplock: who holds the lease, for how long, its never-repeating
  -- number (+1 on every claim; requeue and release do not reset it), and when
  -- the job ended.
  locked_by             text,
  lease_seq             bigint      NOT NULL DEFAULT 0,
  visibility_timeout_ms int,
  finished_at           timestamptz,
  CONSTRAINT jobs_attempts_chk CHECK (attempts >= 0),
  CONSTRAINT jobs_max_attempts_chk CHECK (max_attempts >= 1),
  CONSTRAINT jobs_visibility_timeout_chk CHECK (visibility_timeout_ms > 0)
);

-- The partial claim index: only queued jobs are indexed.
CREATE INDEX jobs_claim_idx
  ON jobs (queue, priority DESC, run_at)
  WHERE status = 'queued';

-- The sweeper scans only leased jobs, oldest lease first. The predicate is on
-- locked_at, not status, so that result statements (status = 'running' AND
-- id = ANY(...)) go through the primary key instead of scanning every lease.
CREATE INDEX jobs_lease_idx
  ON jobs (locked_at)
  WHERE locked_at IS NOT NULL;

-- Dead letter and failed jobs, for requeue and inspection by kind.
CREATE INDEX jobs_finished_idx
  ON jobs (status, kind)
  WHERE status IN ('failed', 'dead');

-- A high-churn queue table gets aggressive autovacuum.
ALTER TABLE jobs SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.01,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0
);

-- Succeeded jobs moved out of the hot table by onSuccess: 'archive' .
CREATE TABLE jobs_archive (
  id                    bigint      PRIMARY KEY,
  queue                 text        NOT NULL,
  kind                  text        NOT NULL,
  payload               jsonb       NOT NULL,
  status                text        NOT NULL,
  priority              int         NOT NULL,
  run_at                timestamptz NOT NULL,
  attempts              int         NOT NULL,
  max_attempts          int         NOT NULL,
  locked_at             timestamptz,
  last_error            text,
  created_at            timestamptz NOT NULL,
  locked_by             text,
  lease_seq             bigint      NOT NULL DEFAULT 0,
  visibility_timeout_ms int,
  finished_at           timestamptz,
  archived_at           timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT jobs_archive_status_chk
    CHECK (status IN ('queued','running','succeeded','failed','dead'))
);

-- The insert trigger that wakes workers (jobs_notify) is in
-- functions/notifications.sql.
