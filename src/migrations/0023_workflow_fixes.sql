-- skiplock migration 23: four repairs to workflows.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0023_workflow_fixes.sql).
--
-- 1. The completion message moves to the channel 'skipdone:<schema>'. The old
--    name, 'skiplock:<schema>:done', passed PostgreSQL's 63-byte limit for a
--    schema name of 50 bytes or more, and pg_notify then failed the statement
--    that ended an awaited job. The new name is as long as the wake-up
--    channel 'skiplock:<schema>', which fits for every schema name allowed.
-- 2. A child released by its last parent keeps its run_at: a runAt or delayMs
--    given at its enqueue still holds (it was made due at once).
-- 3. A failed parent cancels all its waiting descendants (those that said
--    'cancel', through any chain of them) in one statement, instead of one
--    nested trigger call per level: a chain hundreds deep ran out of stack
--    (54001) and cancelled nothing.
-- 4. A job with parents put back to `queued` (requeue, by the library, the SQL
--    function or by hand) waits again, as `waiting`, for those of its parents
--    that have not ended yet; one whose parents have all ended is queued as
--    before.

-- Repair 1 is jobs_done_notify's, in functions/notifications.sql.

-- %1$I is the schema, %2$L the wake-up channel (as in migration 15).
DO $migration$
BEGIN
  EXECUTE pg_catalog.format($f$
    -- Repairs 2 and 3 are jobs_parent_ended's, in functions/dependencies.sql.

    -- A job with parents put back to `queued` from an end: it waits for the
    -- parents whose end is not recorded yet. Runs after the row is locked, and
    -- reads the edges with a snapshot of its own (VOLATILE plpgsql under READ
    -- COMMITTED): a parent that ended and committed before is seen as ended;
    -- one that ends after finds this row `waiting` and releases it.
    CREATE FUNCTION %1$I.jobs_requeue_waits() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
      SELECT count(*)::int INTO NEW.pending_parents FROM %1$I.job_dependencies d
      WHERE d.child_id = NEW.id AND d.parent_status IS NULL;
      IF NEW.pending_parents > 0 THEN
        NEW.status := 'waiting';
      END IF;
      RETURN NEW;
    END
    $body$;
  $f$, pg_catalog.current_schema(), 'skiplock:' || pg_catalog.current_schema());
END
$migration$;

-- Only rows enqueued with parents (pending_parents not NULL) that come back
-- from an end call the function.
CREATE TRIGGER jobs_requeue_waits
  BEFORE UPDATE OF status ON jobs
  FOR EACH ROW
  WHEN (OLD.pending_parents IS NOT NULL
        AND OLD.status IN ('succeeded', 'failed', 'dead', 'cancelled')
        AND NEW.status = 'queued')
  EXECUTE FUNCTION jobs_requeue_waits();

-- 5. The SQL cancel() cancels `waiting` jobs too, as the library's cancel does
--    (a waiting job's children that said 'cancel' follow it, by the triggers),
--    and takes 'waiting' in `statuses`: functions/sql-api.sql.
