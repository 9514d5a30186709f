-- skiplock functions: the group limits' order (strictOrder).
-- Runs after the versioned migrations, in their transaction, whenever a
-- migration run applies one, with search_path set to the target schema (with
-- psql, after the numbered files: SET search_path TO skiplock;
-- \i functions/groups.sql). Every statement replaces what an earlier version
-- made, so running it again changes nothing.

DO $functions$
DECLARE
  s text := pg_catalog.current_schema();
BEGIN
  -- strictOrder: whether a queued job of the key comes before job_id in the
  -- key's order (those that started before first, then priority, run_at, id)
  -- and cannot start now (not due, or of a kind not in kinds), holding job_id
  -- back. Reads the key's jobs as they are now, not as the claim's snapshot saw them.
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.strict_order_held(queue_name text, key text, job_id bigint, kinds text[])
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
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
    $body$ $f$, s);
END
$functions$;
