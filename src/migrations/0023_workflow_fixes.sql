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

CREATE OR REPLACE FUNCTION jobs_done_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('skipdone:' || TG_TABLE_SCHEMA,
                    json_build_object('type', 'done', 'queue', NULL, 'delayMs', 0,
                                      'ids', json_build_array(OLD.id::text))::text);
  RETURN NULL;
END $$;

-- %1$I is the schema, %2$L the wake-up channel (as in migration 15).
DO $migration$
BEGIN
  EXECUTE pg_catalog.format($f$
    -- A parent ended (p_status: succeeded, failed, dead or cancelled): record
    -- it on its edges, once (a result the finish statement already wrote there
    -- is kept, as in migration 18), and decrement each waiting child's counter. A
    -- child whose counter reaches zero is queued, due at its own run_at (a
    -- delay it was enqueued with still holds; migration 15 made it due now),
    -- and its queue woken for the earliest of them. A failure first cancels, in one statement, every
    -- waiting descendant reached through children that said 'cancel' (each
    -- naming the parent it was reached through); the direct children are
    -- then written as before. The cancelled rows' own trigger calls find
    -- their 'cancel' children already cancelled, so calls nest two deep at
    -- most. Every child and descendant is locked in id order before it is
    -- read, so two parents sharing children wait for each other instead of
    -- deadlocking, and the state read after the lock is the committed one.
    CREATE OR REPLACE FUNCTION %1$I.jobs_parent_ended(p_id bigint, p_status text, p_result jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    DECLARE
      v_children bigint[];
      v_doomed bigint[];
      v_below bigint[];
      v_queues text[];
      v_delays bigint[];
    BEGIN
      WITH edges AS (
        UPDATE %1$I.job_dependencies d
        SET parent_status = p_status, parent_result = COALESCE(d.parent_result, p_result)
        WHERE d.parent_id = p_id AND d.parent_status IS NULL
        RETURNING d.child_id
      )
      SELECT array_agg(child_id ORDER BY child_id) INTO v_children FROM edges;
      IF v_children IS NULL THEN
        RETURN;
      END IF;
      IF p_status <> 'succeeded' THEN
        -- The children to cancel, and the waiting descendants below them that will be.
        WITH RECURSIVE doomed(id) AS (
          SELECT c.id FROM %1$I.jobs c
          WHERE c.id = ANY (v_children) AND c.status = 'waiting' AND c.on_parent_failure = 'cancel'
          UNION
          SELECT c.id FROM doomed x
          JOIN %1$I.job_dependencies d ON d.parent_id = x.id
          JOIN %1$I.jobs c ON c.id = d.child_id
          WHERE c.status = 'waiting' AND c.on_parent_failure = 'cancel'
        )
        SELECT array_agg(id ORDER BY id) INTO v_doomed FROM doomed;
        SELECT array_agg(id ORDER BY id) INTO v_below FROM unnest(v_doomed) AS id WHERE id <> ALL (v_children);
      END IF;
      PERFORM 1 FROM %1$I.jobs
      WHERE id = ANY (v_children) OR id = ANY (COALESCE(v_below, '{}'))
      ORDER BY id FOR UPDATE;
      IF v_below IS NOT NULL THEN
        UPDATE %1$I.jobs c
        SET status = 'cancelled', finished_at = now(),
            last_error = 'parent job ' || (SELECT min(d.parent_id) FROM %1$I.job_dependencies d
                                           WHERE d.child_id = c.id AND d.parent_id = ANY (v_doomed))
                         || ' ended cancelled'
        WHERE c.id = ANY (v_below) AND c.status = 'waiting';
      END IF;
      WITH released AS (
        UPDATE %1$I.jobs c
        SET pending_parents = c.pending_parents - 1,
            status = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel' THEN 'cancelled'
                          WHEN c.pending_parents = 1 THEN 'queued' ELSE 'waiting' END,
            finished_at = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel' THEN now() END,
            last_error = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel'
                              THEN 'parent job ' || p_id || ' ended ' || p_status ELSE c.last_error END
        WHERE c.id = ANY (v_children) AND c.status = 'waiting'
        RETURNING c.queue, c.status, c.run_at
      )
      SELECT array_agg(queue), array_agg(delay_ms) INTO v_queues, v_delays
      FROM (SELECT queue, GREATEST(0, ceil(EXTRACT(EPOCH FROM min(run_at) - now()) * 1000))::bigint AS delay_ms
            FROM released WHERE status = 'queued' GROUP BY queue) due;
      PERFORM %1$I.wake_up(%2$L, 'insert', v_queues[i], v_delays[i])
      FROM generate_subscripts(v_queues, 1) AS i;
    END
    $body$;

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
--    and takes 'waiting' in `statuses`. Same signature; otherwise as in
--    migration 12.
DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
BEGIN
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.cancel(
      ids      bigint[] DEFAULT NULL,
      kinds    text[]   DEFAULT NULL,
      queues   text[]   DEFAULT NULL,
      statuses text[]   DEFAULT NULL,
      tags     text[]   DEFAULT NULL,
      OUT cancelled int,
      OUT running   int
    )
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
    AS %2$L $f$, s, pg_catalog.format($body$
    #variable_conflict use_column
    DECLARE
      told_n bigint;
    BEGIN
      IF cancel.ids IS NULL AND cancel.kinds IS NULL AND cancel.queues IS NULL AND cancel.statuses IS NULL
         AND cancel.tags IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'give ids, kinds, queues, statuses or tags (cancel never means every job)';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(cancel.statuses) AS t(state)
                 WHERE t.state IS NULL OR t.state NOT IN ('waiting', 'queued', 'running')) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'statuses: must be waiting, queued or running';
      END IF;
      IF cancel.tags = '{}' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'tags: must hold at least one tag';
      END IF;
      IF cancel.tags IS NOT NULL AND (
           pg_catalog.array_ndims(cancel.tags) > 1
           OR pg_catalog.cardinality(cancel.tags) > 20
           OR EXISTS (SELECT 1 FROM pg_catalog.unnest(cancel.tags) AS t(tag)
                      WHERE t.tag IS NULL OR t.tag = '' OR pg_catalog.char_length(t.tag) > 100)
           OR (SELECT count(DISTINCT t.tag) FROM pg_catalog.unnest(cancel.tags) AS t(tag))
              < pg_catalog.cardinality(cancel.tags)) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'tags: must be at most 20 distinct tags of 1 to 100 characters each';
      END IF;
      -- One statement for all: a job that starts running meanwhile cannot slip through.
      WITH hit AS (
        UPDATE %1$I.jobs j
        SET status = CASE WHEN j.status IN ('waiting', 'queued') THEN 'cancelled' ELSE j.status END,
            finished_at = CASE WHEN j.status IN ('waiting', 'queued') THEN now() ELSE j.finished_at END,
            cancel_requested_at = COALESCE(j.cancel_requested_at, now())
        WHERE j.status IN ('waiting', 'queued', 'running')
          AND j.status = ANY(COALESCE(cancel.statuses, ARRAY['waiting', 'queued', 'running']))
          AND (cancel.ids IS NULL OR j.id = ANY(cancel.ids))
          AND (cancel.kinds IS NULL OR j.kind = ANY(cancel.kinds))
          AND (cancel.queues IS NULL OR j.queue = ANY(cancel.queues))
          AND (cancel.tags IS NULL OR j.tags @> cancel.tags)
        RETURNING j.id, j.status
      ), told AS (
        SELECT %1$I.control(%2$L, 'cancel', NULL, array_agg(hit.id)) FROM hit
        WHERE hit.status = 'running' HAVING count(*) > 0
      )
      -- told is read so that it runs.
      SELECT count(*) FILTER (WHERE hit.status = 'cancelled')::int,
             count(*) FILTER (WHERE hit.status = 'running')::int,
             (SELECT count(*) FROM told)
      INTO cancel.cancelled, cancel.running, told_n
      FROM hit;
    END
    $body$, s, 'skiplock:' || s));
END
$migration$;
