-- skiplock migration 24: under strictOrder, a key's jobs that have started
-- before go first, whatever brought them back to `queued`.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0024_strict_order_started.sql).
--
-- "Already ran" was `attempts > 0`: a job waiting to retry. A job given back
-- at a worker's stop, or snoozed, gets its attempt back (attempts 0 on a first
-- attempt), so it went behind its key's later jobs, which then started before
-- it. A job that has been claimed has `lease_seq > 0` (every claim counts it,
-- nothing lowers it), which is what the order now reads: the index, and
-- strict_order_held (otherwise as in migration 22).

DROP INDEX jobs_group_retry_idx;
CREATE INDEX jobs_group_retry_idx
  ON jobs (queue, group_key, priority DESC, run_at, id)
  WHERE status = 'queued' AND group_key IS NOT NULL AND lease_seq > 0;

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
  path text := 'pg_catalog, pg_temp';
BEGIN
  -- strictOrder: whether a queued job of the key comes before job_id in the
  -- key's order (those that started before first, then priority, run_at, id)
  -- and cannot start now (not due, or of a kind not in kinds), holding job_id
  -- back. Reads the key's jobs as they are now, not as the claim's snapshot saw them.
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.strict_order_held(queue_name text, key text, job_id bigint, kinds text[])
    RETURNS boolean
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
    DECLARE
      o record;
      jobs_ahead refcursor;
      started boolean;
    BEGIN
      SELECT j.lease_seq > 0 INTO started FROM %1$I.jobs j WHERE j.id = job_id;
      -- First the key's jobs that started before, then (for a job that never
      -- started) the others; two queries, each in the order of its own index.
      FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
          OPEN jobs_ahead FOR SELECT j.id, j.run_at, j.kind, j.start_by FROM %1$I.jobs j
            WHERE j.queue = queue_name AND j.status = 'queued' AND j.group_key = key AND j.lease_seq > 0
            ORDER BY j.priority DESC, j.run_at, j.id;
        ELSIF started THEN
          EXIT;
        ELSE
          OPEN jobs_ahead FOR SELECT j.id, j.run_at, j.kind, j.start_by FROM %1$I.jobs j
            WHERE j.queue = queue_name AND j.status = 'queued' AND j.group_key = key AND j.lease_seq = 0
            ORDER BY j.priority DESC, j.run_at, j.id;
        END IF;
        LOOP
          FETCH jobs_ahead INTO o;
          EXIT WHEN NOT FOUND OR o.id = job_id;
          -- A job past its start deadline is never claimed, and holds nothing.
          IF (o.start_by IS NULL OR o.start_by >= now()) AND NOT (o.run_at <= now() AND o.kind = ANY(kinds)) THEN
            CLOSE jobs_ahead;
            RETURN true;
          END IF;
        END LOOP;
        CLOSE jobs_ahead;
      END LOOP;
      RETURN false;
    END
    $body$ $f$, s, path);
END
$migration$;
