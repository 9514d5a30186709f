-- skiplock functions: the queue as SQL functions, for psql, pg_cron, triggers
-- and any language: enqueue, requeue, cancel and sweep. Their effects are the
-- library's, wake-ups included (test/sql-library-parity.test.ts holds the two
-- sides equal).
-- Runs after the versioned migrations, in their transaction, whenever a
-- migration run applies one, with search_path set to the target schema (with
-- psql, after the numbered files: SET search_path TO skiplock;
-- \i functions/sql-api.sql). Every statement replaces what an earlier version
-- made, so running it again changes nothing.

-- Each function is SECURITY INVOKER (it runs with the caller's privileges),
-- with search_path pg_catalog, pg_temp, and names every object of this schema
-- qualified, so nothing on a caller's search_path changes what it does. The
-- schema name, the channel and the sweeper's lock key are written into the
-- bodies, so they are created from a DO block; bodies are quoted literals.
-- Bad arguments raise invalid_parameter_value (22023) naming the argument. New
-- arguments come last with NULL defaults, so that every existing call means
-- what it did; a migration that changes a signature drops the old function
-- first (two functions of one name would make calls with fewer arguments
-- ambiguous), and sql/grants.sql grants the new one again.
DO $functions$
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
  -- requeue and cancel act on a selection of jobs: the same first arguments
  -- (tags last), checks and filter. Of the CREATE: %1$I is the schema, %2$s
  -- the name, %3$s the arguments between statuses and tags, %4$s those after
  -- tags, %5$s the RETURNS clause, %6$s the attributes, %7$L the body.
  selection_function text := $f$
    CREATE OR REPLACE FUNCTION %1$I.%2$s(
      ids bigint[] DEFAULT NULL, kinds text[] DEFAULT NULL, queues text[] DEFAULT NULL,
      statuses text[] DEFAULT NULL, %3$s tags text[] DEFAULT NULL %4$s
    ) %5$s
    %6$s
    AS %7$L
  $f$;
  -- The body's start: the variables (%6$s), then the checks of the
  -- arguments. The selection must name something, and its statuses and tags
  -- (if given) must be allowed: %1$s is the function's name, %2$s what else
  -- must hold to refuse a call naming nothing, %3$s that refusal's message,
  -- %4$s the statuses it may name (a text[] literal), %5$s their message.
  selection_head text := $head$
    #variable_conflict use_column
    DECLARE
      %6$s
    BEGIN
      $head$ || $check$
      IF %1$s.ids IS NULL AND %1$s.kinds IS NULL AND %1$s.queues IS NULL AND %1$s.statuses IS NULL
         AND %1$s.tags IS NULL AND %2$s THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = %3$L;
      END IF;
      IF pg_catalog.array_ndims(%1$s.ids) > 1 OR pg_catalog.array_ndims(%1$s.kinds) > 1
         OR pg_catalog.array_ndims(%1$s.queues) > 1 OR pg_catalog.array_ndims(%1$s.statuses) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'ids, kinds, queues, statuses: must be one-dimensional arrays';
      END IF;
      IF EXISTS (SELECT 1 FROM pg_catalog.unnest(%1$s.ids) AS t(id) WHERE t.id IS NULL OR t.id < 1) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'ids: must be job ids (1 or more, not NULL)';
      END IF;
      IF EXISTS (SELECT 1 FROM pg_catalog.unnest(%1$s.kinds) AS t(kind) WHERE t.kind IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'kinds: must not hold NULL';
      END IF;
      IF EXISTS (SELECT 1 FROM pg_catalog.unnest(%1$s.queues) AS t(queue) WHERE t.queue IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'queues: must not hold NULL';
      END IF;
      IF EXISTS (SELECT 1 FROM pg_catalog.unnest(%1$s.statuses) AS t(state)
                 WHERE t.state IS NULL OR t.state <> ALL (%4$L::text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = %5$L;
      END IF;
      IF %1$s.tags = '{}' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'tags: must hold at least one tag';
      END IF;
  $check$ || E'\n      ' || pg_catalog.format(tags_check, '%1$s.tags', 'tags');
  -- The rows of that selection (jobs j), beside the statuses each function
  -- reads its own way: the filters given combine, tags meaning every one.
  selection_filter text := $filter$
          AND (%1$s.ids IS NULL OR j.id = ANY(%1$s.ids))
          AND (%1$s.kinds IS NULL OR j.kind = ANY(%1$s.kinds))
          AND (%1$s.queues IS NULL OR j.queue = ANY(%1$s.queues))
          AND (%1$s.tags IS NULL OR j.tags @> %1$s.tags)
  $filter$;
  -- The first values of an enqueued job's row, from enqueue's arguments, in
  -- the order of its INSERTs' columns; %1$s goes between them.
  job_values text := $values$enqueue.kind%1$sCOALESCE(enqueue.payload, '{}')%1$sCOALESCE(enqueue.queue, 'default')%1$sCOALESCE(enqueue.priority, 0)%1$sCOALESCE(enqueue.run_at, now())%1$sCOALESCE(enqueue.max_attempts, 20)%1$senqueue.max_attempts IS NULL$values$;
  -- What every function here is (see above), given to each CREATE.
  attributes text := $attributes$
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = pg_catalog, pg_temp
  $attributes$;
BEGIN
  -- enqueue: one job, the defaults of the jobs table; returns its id (the
  -- holder's id when its unique key is held). NULL for an optional argument
  -- means its default, as leaving it out does. max_attempts left out lets the
  -- kind's handler decide; tags and start_by as the library's tags and
  -- startBy; depends_on as dependsOn (the job waits for its parents);
  -- group_key as groupKey (1 to 200 characters).
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.enqueue(
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
    %3$s
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
      -- Both on the database's clock: a deadline not after the job is due (nor after now) could only
      -- expire it.
      IF enqueue.start_by <= GREATEST(enqueue.run_at, now()) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'start_by: is not after run_at, nor after now: the job could never start';
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
                %3$s,
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
        VALUES (%3$s,
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
        SELECT %4$s,
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
    $body$, s, pg_catalog.format(tags_check, 'enqueue.tags', 'tags'),
      pg_catalog.format(job_values, E',\n                '), pg_catalog.format(job_values, E',\n               ')),
    attributes);

  -- requeue: dead and failed jobs (or cancelled ones, given by id or status)
  -- back to queued, attempts reset, start deadline cleared; filters combine
  -- (tags: jobs having every one). Returns how many.
  EXECUTE pg_catalog.format(selection_function, s, 'requeue', 'all_jobs boolean DEFAULT false,', '', 'RETURNS int',
    attributes, pg_catalog.format(selection_head, 'requeue', 'NOT COALESCE(requeue.all_jobs, false)',
      'give ids, kinds, queues, statuses or tags, or all_jobs => true for every dead and failed job',
      '{dead,failed,cancelled}', 'statuses: must be dead, failed or cancelled', 'n int;')
    || pg_catalog.format($body$
      IF COALESCE(requeue.all_jobs, false) AND (requeue.ids IS NOT NULL OR requeue.kinds IS NOT NULL
           OR requeue.queues IS NOT NULL OR requeue.statuses IS NOT NULL OR requeue.tags IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'all_jobs: cannot be combined with ids, kinds, queues, statuses or tags';
      END IF;
      WITH requeued AS (
        UPDATE %1$I.jobs j
        SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL,
            cancel_requested_at = NULL, start_by = NULL
        WHERE j.status IN ('dead', 'failed', 'cancelled')
          AND j.status = ANY(COALESCE(requeue.statuses,
                                      CASE WHEN requeue.ids IS NULL THEN ARRAY['dead', 'failed']
                                           ELSE ARRAY['dead', 'failed', 'cancelled'] END))
          %3$s
        RETURNING j.queue
      ), woken AS (
        SELECT %1$I.wake_up(%2$L, 'requeue', q.queue, 0) FROM (SELECT DISTINCT queue FROM requeued) q
      )
      -- woken is read so that it runs.
      SELECT r.n INTO n FROM (SELECT count(*)::int AS n FROM requeued) r, (SELECT count(*) FROM woken) w;
      RETURN n;
    END
    $body$, s, 'skiplock:' || s, pg_catalog.format(selection_filter, 'requeue')));

  -- cancel: waiting and queued jobs end cancelled at once (a waiting job's
  -- children that said 'cancel' follow it, by the triggers); running ones are
  -- marked and their workers told. Never every job: a filter is required.
  EXECUTE pg_catalog.format(selection_function, s, 'cancel', '', ', OUT cancelled int, OUT running int', '',
    attributes, pg_catalog.format(selection_head, 'cancel', 'true',
      'give ids, kinds, queues, statuses or tags (cancel never means every job)',
      '{waiting,queued,running}', 'statuses: must be waiting, queued or running', 'told_n bigint;')
    || pg_catalog.format($body$
      -- One statement for all: a job that starts running meanwhile cannot slip through.
      WITH hit AS (
        UPDATE %1$I.jobs j
        SET status = CASE WHEN j.status IN ('waiting', 'queued') THEN 'cancelled' ELSE j.status END,
            finished_at = CASE WHEN j.status IN ('waiting', 'queued') THEN now() ELSE j.finished_at END,
            cancel_requested_at = COALESCE(j.cancel_requested_at, now())
        WHERE j.status IN ('waiting', 'queued', 'running')
          AND j.status = ANY(COALESCE(cancel.statuses, ARRAY['waiting', 'queued', 'running']))
          %3$s
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
    $body$, s, 'skiplock:' || s, pg_catalog.format(selection_filter, 'cancel')));

  -- sweep: what the workers' sweeper does, under the same advisory lock:
  -- queued jobs past their start deadline end cancelled, expired, and leases
  -- past their visibility timeout are reclaimed (up to 1000 of each per call).
  -- Returns how many leases were reclaimed. NULL means the default.
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.sweep(default_visibility_timeout_ms int DEFAULT 300000)
    RETURNS int
    %3$s
    AS %2$L $f$, s, pg_catalog.format($body$
    DECLARE
      timeout_ms int := COALESCE(sweep.default_visibility_timeout_ms, 300000);
      reclaimed int;
    BEGIN
      -- The workers' shortest visibility timeout; below it a sweep would take live leases.
      IF timeout_ms < 100 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'default_visibility_timeout_ms: must be at least 100 (milliseconds)';
      END IF;
      WITH locked AS (
        SELECT pg_try_advisory_xact_lock(hashtextextended(%3$L, 0)) AS locked
      ), due AS (
        SELECT id FROM %1$I.jobs
        WHERE (SELECT locked FROM locked)
          AND status = 'queued' AND start_by IS NOT NULL AND start_by < now()
        ORDER BY start_by
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
      ), expired_jobs AS (
        UPDATE %1$I.jobs j
        SET status = 'cancelled', finished_at = now(),
            last_error = 'expired: not started by '
                         || to_char(j.start_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.status = 'queued'
        RETURNING j.id
      ), expired AS (
        SELECT id FROM %1$I.jobs
        WHERE (SELECT locked FROM locked)
          AND status = 'running'
          AND locked_at < now() - COALESCE(visibility_timeout_ms, timeout_ms)
                                  * interval '1 millisecond'
        ORDER BY locked_at
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
      ), swept AS (
        UPDATE %1$I.jobs j
        SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                          WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'queued' END,
            locked_at = NULL, locked_by = NULL, last_error = 'reclaimed: visibility timeout',
            finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
                               THEN now() END,
            errors = jsonb_path_query_array(
                       COALESCE(j.errors, '[]'::jsonb)
                         || jsonb_build_array(jsonb_build_object(
                              'attempt', j.attempts, 'error', 'reclaimed: visibility timeout',
                              'at', now(), 'worker', j.locked_by)),
                       '$[last-19 to last]')
        WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
        RETURNING j.queue, j.status
      ), woken AS (
        SELECT %1$I.wake_up(%2$L, 'sweep', q.queue, 0)
        FROM (SELECT DISTINCT queue FROM swept WHERE status = 'queued') q
      )
      -- woken and expired_jobs are read so that they run.
      SELECT s.n INTO reclaimed
      FROM (SELECT count(*)::int AS n FROM swept) s, (SELECT count(*) FROM woken) w,
           (SELECT count(*) FROM expired_jobs) x;
      RETURN reclaimed;
    END
    $body$, s, 'skiplock:' || s, 'skiplock:sweep:' || s), attributes);
END
$functions$;
