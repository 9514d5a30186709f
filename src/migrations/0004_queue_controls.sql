-- skiplock migration 4: queue controls — cancel, paused queues, retention.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0004_queue_controls.sql).

-- A cancelled job ended by an operator, never retried. The CHECK grows; the
-- constraint keeps its name.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_chk;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_chk
  CHECK (status IN ('queued','running','succeeded','failed','dead','cancelled'));
ALTER TABLE jobs_archive DROP CONSTRAINT jobs_archive_status_chk;
ALTER TABLE jobs_archive ADD CONSTRAINT jobs_archive_status_chk
  CHECK (status IN ('queued','running','succeeded','failed','dead','cancelled'));

-- Set by cancel on a running job: the worker holding the lease aborts its
-- handler, and whatever result it writes next turns the job `cancelled`.
ALTER TABLE jobs ADD COLUMN cancel_requested_at timestamptz;
-- The archive keeps the columns of the jobs table.
ALTER TABLE jobs_archive ADD COLUMN cancel_requested_at timestamptz;

-- Retention deletes finished rows oldest first, in small batches.
CREATE INDEX jobs_finished_at_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_archive_finished_at_idx ON jobs_archive (finished_at);

-- Queue settings. A queue without a row is an ordinary, running queue.
CREATE TABLE queues (
  name       text        PRIMARY KEY,
  paused     boolean     NOT NULL DEFAULT false,
  paused_at  timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- A control message (cancel, pause, resume) in the wake-up format, with the
-- ids of the jobs it concerns as decimal strings. NOTIFY payloads are limited
-- to 8000 bytes, so the ids go out in chunks of 300, one message each; with no
-- ids, one message without them.
CREATE FUNCTION control(p_channel text, p_type text, p_queue text, p_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.pg_notify(
    p_channel,
    pg_catalog.json_build_object(
      'type', p_type,
      'queue', CASE WHEN pg_catalog.octet_length(p_queue) <= 1024 THEN p_queue END,
      'delayMs', 0,
      'ids', c.ids
    )::text)
  FROM (
    SELECT pg_catalog.array_agg(t.id::text ORDER BY t.n) AS ids
    FROM pg_catalog.unnest(p_ids) WITH ORDINALITY AS t(id, n)
    GROUP BY (t.n - 1) / 300
    UNION ALL
    SELECT NULL WHERE COALESCE(pg_catalog.cardinality(p_ids), 0) = 0
  ) c
$$;
