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

  -- strict_order_held, which strictOrder reads, is in functions/groups.sql.
END
$migration$;
