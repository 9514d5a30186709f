-- skiplock migration 17: the SQL enqueue() takes group_key (text, last, NULL
-- by default), the library's groupKey: the key a queue's group limits count
-- the job under. Every existing call means what it did.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0017_sql_group_key.sql).

-- As in migration 12, the changed signature is dropped and created;
-- sql/grants.sql grants it again.
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
    ' pg_catalog.timestamptz, pg_catalog.int8[])', s);

  -- enqueue: as in migration 15, and: group_key (as the library's groupKey,
  -- 1 to 200 characters).
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
      depends_on    bigint[]    DEFAULT NULL,
      group_key     text        DEFAULT NULL
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
      IF pg_catalog.char_length(enqueue.group_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'group_key: must be 1 to 200 characters';
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
                               tags, start_by, group_key, status, pending_parents, on_parent_failure, last_error, finished_at)
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
                enqueue.group_key,
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
                               tags, start_by, group_key)
        VALUES (enqueue.kind,
                COALESCE(enqueue.payload, '{}'),
                COALESCE(enqueue.queue, 'default'),
                COALESCE(enqueue.priority, 0),
                COALESCE(enqueue.run_at, now()),
                COALESCE(enqueue.max_attempts, 20),
                enqueue.max_attempts IS NULL,
                job_tags,
                enqueue.start_by,
                enqueue.group_key)
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
                               unique_key, unique_states, tags, start_by, group_key)
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
               enqueue.start_by,
               enqueue.group_key
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
