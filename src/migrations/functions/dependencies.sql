-- skiplock functions: what a parent's end does to the jobs that wait for it.
-- Runs after the versioned migrations, in their transaction, whenever a
-- migration run applies one, with search_path set to the target schema (with
-- psql, after the numbered files: SET search_path TO skiplock;
-- \i functions/dependencies.sql). Every statement replaces what an earlier version
-- made, so running it again changes nothing.

-- Called by the release triggers of the jobs table (migration 15). Runs with
-- search_path pg_catalog, pg_temp and names this schema's objects qualified:
-- %1$I is the schema, %2$L the wake-up channel.
DO $functions$
BEGIN
  EXECUTE pg_catalog.format($f$
    -- A parent ended (p_status: succeeded, failed, dead or cancelled): record
    -- it on its edges, once (a result the finish statement already wrote there
    -- is kept: a parent deleted on success has no row to hold it), and
    -- decrement each waiting child's counter. A child whose counter reaches
    -- zero is queued, due at its own run_at (a delay it was enqueued with
    -- still holds), and its queue woken for the earliest of them. A failure
    -- first cancels, in one statement, every waiting descendant reached
    -- through children that said 'cancel' (each naming the parent it was
    -- reached through); the direct children are then written. The cancelled
    -- rows' own trigger calls find their 'cancel' children already cancelled,
    -- so calls nest two deep at most. Every child and descendant is locked in
    -- id order before it is read, so two parents sharing children wait for
    -- each other instead of deadlocking, and the state read after the lock is
    -- the committed one.
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
  $f$, pg_catalog.current_schema(), 'skiplock:' || pg_catalog.current_schema());
END
$functions$;
