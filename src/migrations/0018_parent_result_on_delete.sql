-- skiplock migration 18: a parent deleted on success keeps its result for its
-- children. Runs with search_path set to the target schema (the migrator does
-- this; with psql: SET search_path TO skiplock; \i 0018_parent_result_on_delete.sql).
--
-- A job under the 'delete' success policy has no row to hold its result, and
-- one under 'archive' leaves the jobs table before its result is anywhere
-- the trigger reads: the finish statement writes the result onto the job's
-- edges in job_dependencies itself, in the statement that deletes the row. The release
-- trigger runs after that statement and records the parent's status; here it
-- keeps a result already on the edge instead of overwriting it with the
-- deleted row's (empty) result column. Same function, same signature: only
-- the UPDATE of the edges changes.

DO $migration$
BEGIN
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.jobs_parent_ended(p_id bigint, p_status text, p_result jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    DECLARE
      v_children bigint[];
      v_queues text[];
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
      PERFORM 1 FROM %1$I.jobs WHERE id = ANY (v_children) ORDER BY id FOR UPDATE;
      WITH released AS (
        UPDATE %1$I.jobs c
        SET pending_parents = c.pending_parents - 1,
            status = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel' THEN 'cancelled'
                          WHEN c.pending_parents = 1 THEN 'queued' ELSE 'waiting' END,
            run_at = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel' THEN c.run_at
                          WHEN c.pending_parents = 1 THEN LEAST(c.run_at, now()) ELSE c.run_at END,
            finished_at = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel' THEN now() END,
            last_error = CASE WHEN p_status <> 'succeeded' AND c.on_parent_failure = 'cancel'
                              THEN 'parent job ' || p_id || ' ended ' || p_status ELSE c.last_error END
        WHERE c.id = ANY (v_children) AND c.status = 'waiting'
        RETURNING c.queue, c.status
      )
      SELECT array_agg(DISTINCT queue) FILTER (WHERE status = 'queued') INTO v_queues FROM released;
      PERFORM %1$I.wake_up(%2$L, 'insert', q, 0) FROM unnest(v_queues) AS q;
    END
    $body$;
  $f$, pg_catalog.current_schema(), 'skiplock:' || pg_catalog.current_schema());
END
$migration$;
