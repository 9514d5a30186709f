-- skiplock migration 22: the limited claim in one statement. The claim locks
-- its queue's row, and then must count the jobs that claims committed while it
-- waited for that lock; its own snapshot was taken before the wait. These
-- functions count with a snapshot of their own, taken when they are called
-- (each is VOLATILE plpgsql: never inlined, a fresh snapshot per query under
-- READ COMMITTED), so that the claim needs no transaction of several
-- statements around it.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0022_fresh_limit_counts.sql).
--
-- SECURITY INVOKER, search_path pinned to pg_catalog, pg_temp (every name qualified).

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
  path text := 'pg_catalog, pg_temp';
BEGIN
  -- The jobs of a queue running now (a held lease), as the queue's concurrency limit counts them.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.queue_running_jobs(queue_name text) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
    BEGIN
      RETURN (SELECT count(*) FROM %1$I.jobs
              WHERE queue = queue_name AND status = 'running' AND locked_at IS NOT NULL);
    END
    $body$ $f$, s, path);

  -- The running jobs of one group key of a queue, as its group concurrency counts them.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.group_running_jobs(queue_name text, key text) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
    BEGIN
      RETURN (SELECT count(*) FROM %1$I.jobs
              WHERE queue = queue_name AND group_key = key AND status = 'running');
    END
    $body$ $f$, s, path);

  -- The starts of one group key counted by its group rate: those in slots
  -- ending after since_ms (ms since the epoch, database clock).
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.group_recent_starts(queue_name text, key text, since_ms bigint) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
    BEGIN
      RETURN (SELECT COALESCE(sum(starts), 0) FROM %1$I.group_rate_slots
              WHERE queue = queue_name AND group_key = key AND slot_end > since_ms);
    END
    $body$ $f$, s, path);

  -- strictOrder: whether a queued job of the key comes before job_id in the
  -- key's order (those waiting to retry first, then priority, run_at, id) and
  -- cannot start now (not due, or of a kind not in kinds), holding job_id back.
  -- Reads the key's jobs as they are now, not as the claim's snapshot saw them.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.strict_order_held(queue_name text, key text, job_id bigint, kinds text[]) RETURNS boolean
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
    DECLARE
      o record;
      jobs_ahead refcursor;
      retry boolean;
    BEGIN
      SELECT j.attempts > 0 INTO retry FROM %1$I.jobs j WHERE j.id = job_id;
      -- First the key's jobs waiting to retry, then (for a job not retried
      -- yet) the others; two queries, each in the order of its own index.
      FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
          OPEN jobs_ahead FOR SELECT j.id, j.run_at, j.kind, j.start_by FROM %1$I.jobs j
            WHERE j.queue = queue_name AND j.status = 'queued' AND j.group_key = key AND j.attempts > 0
            ORDER BY j.priority DESC, j.run_at, j.id;
        ELSIF retry THEN
          EXIT;
        ELSE
          OPEN jobs_ahead FOR SELECT j.id, j.run_at, j.kind, j.start_by FROM %1$I.jobs j
            WHERE j.queue = queue_name AND j.status = 'queued' AND j.group_key = key AND j.attempts = 0
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
