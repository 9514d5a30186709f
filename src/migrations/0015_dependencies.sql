-- skiplock migration 15: dependencies between jobs (dependsOn, fan-in).
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0015_dependencies.sql).
--
-- A job enqueued with parents starts in status `waiting` and counts its
-- unfinished parents in `pending_parents`. Each edge is a row of
-- job_dependencies, which also keeps what the parent ended as (status, kind,
-- result): the child reads its parents from there, so a parent's row may be
-- deleted or archived by its success policy or by retention as usual.
--
-- Release is done by triggers on jobs, in the transaction of whatever
-- statement ends the parent (the worker's finish, the sweeper, cancel, plain
-- SQL): the child's counter is decremented under the child's row lock, so of
-- two parents ending at once in two transactions exactly one sees zero. The
-- triggers' WHEN clauses read `has_children`, false for every job that has no
-- children: such jobs never call the functions.

ALTER TABLE jobs DROP CONSTRAINT jobs_status_chk;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_chk
  CHECK (status IN ('waiting','queued','running','succeeded','failed','dead','cancelled')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_status_chk;
ALTER TABLE jobs_archive DROP CONSTRAINT jobs_archive_status_chk;
ALTER TABLE jobs_archive ADD CONSTRAINT jobs_archive_status_chk
  CHECK (status IN ('waiting','queued','running','succeeded','failed','dead','cancelled'));

-- has_children: set (never cleared) when a child names this job as a parent.
-- pending_parents: the child's parents not yet ended; NULL for a job enqueued
-- without parents. on_parent_failure: what a parent ending failed, dead or
-- cancelled does to the child ('cancel' it, or count it as ended and 'run').
ALTER TABLE jobs
  ADD COLUMN has_children boolean NOT NULL DEFAULT false,
  ADD COLUMN pending_parents int,
  ADD COLUMN on_parent_failure text,
  ADD CONSTRAINT jobs_pending_parents_chk CHECK (pending_parents >= 0),
  ADD CONSTRAINT jobs_on_parent_failure_chk CHECK (on_parent_failure IN ('cancel', 'run'));

-- One row per edge; parent_status and parent_result are NULL until the parent
-- ends. No foreign keys: a parent's row may leave jobs (deleted on success,
-- archived) while its children wait, and a foreign key would cost every delete
-- on jobs a lookup. A child's edges are deleted with the child's row.
CREATE TABLE job_dependencies (
  parent_id     bigint NOT NULL,
  child_id      bigint NOT NULL,
  parent_kind   text   NOT NULL,
  parent_status text,
  parent_result jsonb,
  PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_dependencies_child_idx ON job_dependencies (child_id);

-- The functions run with search_path pg_catalog, pg_temp (a caller's or a
-- planted object can redirect nothing) and name this schema's objects
-- qualified: %1$I is the schema, %2$L the jobs table's name as text, %3$L the
-- wake-up channel.
DO $migration$
BEGIN
  EXECUTE pg_catalog.format($f$
    -- jobs_parent_ended, which records a parent's end and releases or
    -- cancels its children, is in functions/dependencies.sql.

    -- The trigger side: what the row ended as. A row deleted while running
    -- ended by success (the 'delete' and 'archive' success policies); a row
    -- deleted before it ended (by hand) counts as cancelled. The result is
    -- read through to_jsonb, so this works whether or not the table has a
    -- result column.
    CREATE FUNCTION %1$I.jobs_release_children() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        PERFORM %1$I.jobs_parent_ended(OLD.id, CASE WHEN OLD.status = 'running' THEN 'succeeded' ELSE 'cancelled' END,
                                       to_jsonb(OLD) -> 'result');
      ELSE
        PERFORM %1$I.jobs_parent_ended(NEW.id, NEW.status, to_jsonb(NEW) -> 'result');
      END IF;
      RETURN NULL;
    END
    $body$;

    -- A child's edges go with its row.
    CREATE FUNCTION %1$I.jobs_forget_parents() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
      DELETE FROM %1$I.job_dependencies WHERE child_id = OLD.id;
      RETURN NULL;
    END
    $body$;

    -- Before a child is inserted: takes its id, locks its parents (in id
    -- order) and marks them, records the edges, and says what the child
    -- starts as: `waiting` with the count of parents not yet ended; `queued`
    -- when every parent has ended (and none failed, or p_on_failure is
    -- 'run'); `cancelled` with last_error naming the first failed parent
    -- otherwise. A parent that is in neither jobs nor the archive raises
    -- SQLSTATE P0002, so the statement that would insert the child inserts
    -- nothing. The parents stay locked until the caller commits, so a parent
    -- ending meanwhile sees the edge.
    CREATE FUNCTION %1$I.jobs_prepare_child(
      p_parents bigint[], p_on_failure text,
      OUT child_id bigint, OUT status text, OUT pending_parents int, OUT last_error text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    DECLARE
      v_missing bigint;
      v_failed record;
    BEGIN
      child_id := nextval(pg_get_serial_sequence(%2$L, 'id'));
      PERFORM 1 FROM %1$I.jobs j WHERE j.id = ANY (p_parents) ORDER BY j.id FOR UPDATE;
      UPDATE %1$I.jobs j SET has_children = true WHERE j.id = ANY (p_parents) AND NOT j.has_children;
      SELECT p INTO v_missing FROM unnest(p_parents) AS p
      WHERE NOT EXISTS (SELECT 1 FROM %1$I.jobs j WHERE j.id = p)
        AND NOT EXISTS (SELECT 1 FROM %1$I.jobs_archive a WHERE a.id = p)
      LIMIT 1;
      IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'P0002', MESSAGE = 'no job ' || v_missing;
      END IF;
      INSERT INTO %1$I.job_dependencies (parent_id, child_id, parent_kind, parent_status, parent_result)
      SELECT p.id, jobs_prepare_child.child_id, p.kind,
             CASE WHEN p.status IN ('succeeded', 'failed', 'dead', 'cancelled') THEN p.status END,
             CASE WHEN p.status IN ('succeeded', 'failed', 'dead', 'cancelled') THEN p.row -> 'result' END
      FROM (SELECT j.id, j.kind, j.status, to_jsonb(j) AS row FROM %1$I.jobs j WHERE j.id = ANY (p_parents)
            UNION ALL
            SELECT a.id, a.kind, a.status, to_jsonb(a) FROM %1$I.jobs_archive a
            WHERE a.id = ANY (p_parents) AND NOT EXISTS (SELECT 1 FROM %1$I.jobs j WHERE j.id = a.id)) p
      ON CONFLICT DO NOTHING;
      SELECT count(*) FILTER (WHERE d.parent_status IS NULL)::int INTO pending_parents
      FROM %1$I.job_dependencies d WHERE d.child_id = jobs_prepare_child.child_id;
      SELECT d.parent_id, d.parent_status INTO v_failed FROM %1$I.job_dependencies d
      WHERE d.child_id = jobs_prepare_child.child_id AND d.parent_status <> 'succeeded'
      ORDER BY d.parent_id LIMIT 1;
      IF v_failed.parent_id IS NOT NULL AND p_on_failure = 'cancel' THEN
        status := 'cancelled';
        last_error := 'parent job ' || v_failed.parent_id || ' ended ' || v_failed.parent_status;
      ELSIF pending_parents > 0 THEN
        status := 'waiting';
      ELSE
        status := 'queued';
      END IF;
    END
    $body$;
  $f$, pg_catalog.current_schema(),
       pg_catalog.quote_ident(pg_catalog.current_schema()) || '.jobs',
       'skiplock:' || pg_catalog.current_schema());
END
$migration$;

-- Jobs without children never call the functions: the WHEN clauses read
-- has_children (false for them) before anything else.
CREATE TRIGGER jobs_release_children_on_end
  AFTER UPDATE OF status ON jobs
  FOR EACH ROW
  WHEN (OLD.has_children
        AND NEW.status IN ('succeeded', 'failed', 'dead', 'cancelled')
        AND OLD.status NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_release_children();

CREATE TRIGGER jobs_release_children_on_delete
  AFTER DELETE ON jobs
  FOR EACH ROW
  WHEN (OLD.has_children AND OLD.status NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_release_children();

CREATE TRIGGER jobs_forget_parents
  AFTER DELETE ON jobs
  FOR EACH ROW
  WHEN (OLD.pending_parents IS NOT NULL)
  EXECUTE FUNCTION jobs_forget_parents();

-- The SQL enqueue() takes depends_on (bigint[], last, NULL by default), so
-- every existing call means what it did (functions/sql-api.sql). As in
-- migration 12, the changed signature is dropped; sql/grants.sql grants the
-- new one again.
DROP FUNCTION IF EXISTS enqueue(text, jsonb, text, int4, timestamptz, int4,
  text, text[], text[], timestamptz);
