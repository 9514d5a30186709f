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
    -- A parent ended (p_status: succeeded, failed, dead or cancelled): record
    -- it on its edges, once, and decrement each waiting child's counter. A
    -- child whose counter reaches zero is queued (due now at the latest) and
    -- its queue woken; a failure cancels the children that said 'cancel',
    -- which ends them and so calls this function for their own children. The
    -- children are locked in id order before they are read, so two parents
    -- sharing children wait for each other instead of deadlocking, and the
    -- count read after the lock is the committed one.
    CREATE FUNCTION %1$I.jobs_parent_ended(p_id bigint, p_status text, p_result jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    DECLARE
      v_children bigint[];
      v_queues text[];
    BEGIN
      WITH edges AS (
        UPDATE %1$I.job_dependencies d SET parent_status = p_status, parent_result = p_result
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
      PERFORM %1$I.wake_up(%3$L, 'insert', q, 0) FROM unnest(v_queues) AS q;
    END
    $body$;

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
-- every existing call means what it did. As in migration 12, the changed
-- signature is dropped and created; sql/grants.sql grants it again.
DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
  -- The library's bounds on tags: at most 20, each 1–100 characters, no
  -- repeats. An empty array is no tags. %1$s is the array to check.
  tags_check text := $check$
      IF %1$s IS NOT NULL AND (
           pg_catalog.array_ndims(%1$s) > 1
           OR pg_catalog.cardinality(%1$s) > 20
           OR EXISTS (SELECT 1 FROM pg_catalog.unnest(%1$s) AS t(tag)
                      WHERE t.tag IS NULL OR t.tag = '' OR pg_catalog.char_length(t.tag) > 100)
           OR (SELECT count(DISTINCT t.tag) FROM pg_catalog.unnest(%1$s) AS t(tag)) < pg_catalog.cardinality(%1$s)) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = '%2$s: must be at most 20 distinct tags of 1 to 100 characters each';
      END IF;
  $check$;
BEGIN
  EXECUTE pg_catalog.format(
    'DROP FUNCTION %I.enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4,'
    ' pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.text, pg_catalog.text[], pg_catalog.text[],'
    ' pg_catalog.timestamptz)', s);

  -- enqueue: as in migration 12, and: depends_on (as the library's
  -- dependsOn, ids only; onParentFailure 'cancel'): the job starts waiting
  -- until those jobs ended. Not with a unique_key.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.enqueue(
      kind          text,
      payload       jsonb       DEFAULT '{}',
      queue         text        DEFAULT 'default',
      priority      int         DEFAULT 0,
      run_at        timestamptz DEFAULT now(),
      max_attempts  int         DEFAULT NULL,
      unique_key    text        DEFAULT NULL,
      unique_states text[]      DEFAULT NULL,
      tags          text[]      DEFAULT NULL,
      start_by      timestamptz DEFAULT NULL,
      depends_on    bigint[]    DEFAULT NULL
    ) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
    AS %2$L $f$, s, pg_catalog.format($body$
    #variable_conflict use_column
    DECLARE
      states text[];
      job_tags text[] := NULLIF(enqueue.tags, '{}');
      job_id bigint;
      child record;
    BEGIN
      -- The library's limits on names and values, so that SQL callers get the same answers.
      IF enqueue.kind IS NULL OR enqueue.kind = '' OR octet_length(enqueue.kind) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'kind: must be a non-empty name of at most 1024 bytes';
      END IF;
      IF enqueue.queue = '' OR octet_length(enqueue.queue) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'queue: must be a non-empty name of at most 1024 bytes';
      END IF;
      IF enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'max_attempts: must be at least 1';
      END IF;
      IF NOT isfinite(enqueue.run_at) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'run_at: must be a finite time';
      END IF;
      IF NOT isfinite(enqueue.start_by) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'start_by: must be a finite time';
      END IF;
      %2$s
      IF enqueue.depends_on IS NOT NULL THEN
        IF enqueue.unique_key IS NOT NULL OR enqueue.unique_states IS NOT NULL THEN
          RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'depends_on: not with a unique_key';
        END IF;
        IF pg_catalog.cardinality(enqueue.depends_on) NOT BETWEEN 1 AND 1000
           OR pg_catalog.array_ndims(enqueue.depends_on) > 1
           OR pg_catalog.array_position(enqueue.depends_on, NULL) IS NOT NULL THEN
          RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'depends_on: must be 1 to 1000 job ids';
        END IF;
        BEGIN
          SELECT * INTO child FROM %1$I.jobs_prepare_child(enqueue.depends_on, 'cancel');
        EXCEPTION WHEN no_data_found THEN
          RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'depends_on: ' || SQLERRM;
        END;
        INSERT INTO %1$I.jobs (id, kind, payload, queue, priority, run_at, max_attempts, max_attempts_default,
                               tags, start_by, status, pending_parents, on_parent_failure, last_error, finished_at)
        OVERRIDING SYSTEM VALUE
        VALUES (child.child_id,
                enqueue.kind,
                COALESCE(enqueue.payload, '{}'),
                COALESCE(enqueue.queue, 'default'),
                COALESCE(enqueue.priority, 0),
                COALESCE(enqueue.run_at, now()),
                COALESCE(enqueue.max_attempts, 20),
                enqueue.max_attempts IS NULL,
                job_tags,
                enqueue.start_by,
                child.status,
                child.pending_parents,
                'cancel',
                child.last_error,
                CASE WHEN child.status = 'cancelled' THEN now() END);
        RETURN child.child_id;
      END IF;
      IF enqueue.unique_key IS NULL THEN
        IF enqueue.unique_states IS NOT NULL THEN
          RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unique_states: needs a unique_key';
        END IF;
        INSERT INTO %1$I.jobs (kind, payload, queue, priority, run_at, max_attempts, max_attempts_default,
                               tags, start_by)
        VALUES (enqueue.kind,
                COALESCE(enqueue.payload, '{}'),
                COALESCE(enqueue.queue, 'default'),
                COALESCE(enqueue.priority, 0),
                COALESCE(enqueue.run_at, now()),
                COALESCE(enqueue.max_attempts, 20),
                enqueue.max_attempts IS NULL,
                job_tags,
                enqueue.start_by)
        RETURNING id INTO job_id;
        RETURN job_id;
      END IF;

      IF enqueue.unique_key = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unique_key: must not be empty';
      END IF;
      -- A key must fit a btree index entry (the library's limit).
      IF octet_length(enqueue.unique_key) > 2048 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unique_key: must be at most 2048 bytes';
      END IF;
      -- Duplicates dropped, first occurrences in order, as the library stores them.
      SELECT array_agg(u.state ORDER BY u.n) INTO states
      FROM (SELECT t.state, min(t.n) AS n
            FROM unnest(COALESCE(enqueue.unique_states, ARRAY['queued', 'running'])) WITH ORDINALITY AS t(state, n)
            GROUP BY t.state) u;
      IF states IS NULL OR EXISTS (
           SELECT 1 FROM unnest(states) AS t(state)
           WHERE t.state IS NULL
              OR t.state NOT IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'unique_states: must be a non-empty array of queued, running, succeeded, failed, dead, cancelled';
      END IF;
      IF NOT 'queued' = ANY (states) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'unique_states: must include queued (a job holds its key from its insert)';
      END IF;

      -- Insert unless the key is held, else read the holder; see migration 8.
      FOR i IN 1..20 LOOP
        INSERT INTO %1$I.jobs (kind, payload, queue, priority, run_at, max_attempts, max_attempts_default,
                               unique_key, unique_states, tags, start_by)
        SELECT enqueue.kind,
               COALESCE(enqueue.payload, '{}'),
               COALESCE(enqueue.queue, 'default'),
               COALESCE(enqueue.priority, 0),
               COALESCE(enqueue.run_at, now()),
               COALESCE(enqueue.max_attempts, 20),
               enqueue.max_attempts IS NULL,
               enqueue.unique_key,
               states,
               job_tags,
               enqueue.start_by
        WHERE NOT EXISTS (SELECT 1 FROM %1$I.jobs h WHERE h.unique_lock = enqueue.unique_key)
        ON CONFLICT (unique_lock) WHERE unique_lock IS NOT NULL DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
          RETURN job_id;
        END IF;
        SELECT h.id INTO job_id FROM %1$I.jobs h WHERE h.unique_lock = enqueue.unique_key;
        IF job_id IS NOT NULL THEN
          RETURN job_id;
        END IF;
      END LOOP;
      RAISE EXCEPTION 'the holder of unique key %% kept finishing while it was read', enqueue.unique_key;
    END
    $body$, s, pg_catalog.format(tags_check, 'enqueue.tags', 'tags')));
END
$migration$;
