-- skiplock migration 8: the SQL functions catch up with the library. enqueue
-- takes a unique key (and the statuses that hold it), cancel is new, and
-- requeue takes cancelled jobs back as the library's does.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0008_sql_cancel.sql).
--
-- As in migration 5: SECURITY INVOKER, search_path pinned to pg_catalog, this
-- schema, pg_temp last; schema, channel and every parameter written qualified.
-- Each body is passed as a quoted literal (not dollar-quoted), so no schema
-- name can end it early.
-- Bad arguments raise invalid_parameter_value (22023) naming the argument, and
-- change nothing, like the library's ValidationError.

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
  path text := pg_catalog.format('pg_catalog, %I, pg_temp', pg_catalog.current_schema());
BEGIN
  -- A new signature: replace the function rather than add an overload (two
  -- enqueue functions would make every call with fewer arguments ambiguous).
  EXECUTE pg_catalog.format(
    'DROP FUNCTION %I.enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4,'
    ' pg_catalog.timestamptz, pg_catalog.int4)', s);

  -- enqueue: one job, the defaults of the jobs table; returns its id. NULL for
  -- an optional argument means its default, as leaving it out does. Without
  -- max_attempts the job takes its kind's maxAttempts from the handler that
  -- claims it (else 20), as a library enqueue without it does.
  -- With unique_key, as the library's default (onConflict 'skip'): when a job
  -- holds the key, nothing is inserted and that job's id is returned.
  -- unique_states are the statuses in which the job holds its key (default
  -- queued and running; must include queued).
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.enqueue(
      kind          text,
      payload       jsonb       DEFAULT '{}',
      queue         text        DEFAULT 'default',
      priority      int         DEFAULT 0,
      run_at        timestamptz DEFAULT now(),
      max_attempts  int         DEFAULT NULL,
      unique_key    text        DEFAULT NULL,
      unique_states text[]      DEFAULT NULL
    ) RETURNS bigint
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS %3$L $f$, s, path, pg_catalog.format($body$
    #variable_conflict use_column
    DECLARE
      states text[];
      job_id bigint;
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
      IF enqueue.unique_key IS NULL THEN
        IF enqueue.unique_states IS NOT NULL THEN
          RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unique_states: needs a unique_key';
        END IF;
        INSERT INTO %1$I.jobs (kind, payload, queue, priority, run_at, max_attempts, max_attempts_default)
        VALUES (enqueue.kind,
                COALESCE(enqueue.payload, '{}'),
                COALESCE(enqueue.queue, 'default'),
                COALESCE(enqueue.priority, 0),
                COALESCE(enqueue.run_at, now()),
                COALESCE(enqueue.max_attempts, 20),
                enqueue.max_attempts IS NULL)
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

      -- The library's two statements: insert unless the key is held (NOT EXISTS
      -- spares an id for a committed holder; ON CONFLICT waits out an
      -- uncommitted one), else read the holder. Each runs on a fresh snapshot
      -- (read committed), so a holder that finished in between is retried.
      FOR i IN 1..20 LOOP
        INSERT INTO %1$I.jobs (kind, payload, queue, priority, run_at, max_attempts, max_attempts_default,
                               unique_key, unique_states)
        SELECT enqueue.kind,
               COALESCE(enqueue.payload, '{}'),
               COALESCE(enqueue.queue, 'default'),
               COALESCE(enqueue.priority, 0),
               COALESCE(enqueue.run_at, now()),
               COALESCE(enqueue.max_attempts, 20),
               enqueue.max_attempts IS NULL,
               enqueue.unique_key,
               states
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
    $body$, s));

  -- requeue: dead, failed and cancelled jobs back to queued (attempts 0, run_at
  -- now, last_error and cancel request cleared), waking workers for their
  -- queues; returns how many. Every given filter must match. Without statuses:
  -- dead and failed jobs, and cancelled ones too when ids are given (jobs
  -- named by id come back from any of the three). No filter at all is refused
  -- (like the library's requeue({})), unless all_jobs => true: every dead and
  -- failed job. A new signature: replaced, not overloaded.
  EXECUTE pg_catalog.format(
    'DROP FUNCTION %I.requeue(pg_catalog.int8[], pg_catalog.text[], pg_catalog.text[], pg_catalog.text[])', s);
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.requeue(
      ids      bigint[] DEFAULT NULL,
      kinds    text[]   DEFAULT NULL,
      queues   text[]   DEFAULT NULL,
      statuses text[]   DEFAULT NULL,
      all_jobs boolean  DEFAULT false
    ) RETURNS int
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS %3$L $f$, s, path, pg_catalog.format($body$
    #variable_conflict use_column
    DECLARE
      n int;
    BEGIN
      IF requeue.ids IS NULL AND requeue.kinds IS NULL AND requeue.queues IS NULL AND requeue.statuses IS NULL
         AND NOT COALESCE(requeue.all_jobs, false) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'give ids, kinds, queues or statuses, or all_jobs => true for every dead and failed job';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(requeue.statuses) AS t(state)
                 WHERE t.state IS NULL OR t.state NOT IN ('dead', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'statuses: must be dead, failed or cancelled';
      END IF;
      WITH requeued AS (
        UPDATE %1$I.jobs
        SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL,
            cancel_requested_at = NULL
        WHERE status IN ('dead', 'failed', 'cancelled')
          AND status = ANY(COALESCE(requeue.statuses,
                                    CASE WHEN requeue.ids IS NULL THEN ARRAY['dead', 'failed']
                                         ELSE ARRAY['dead', 'failed', 'cancelled'] END))
          AND (requeue.ids IS NULL OR id = ANY(requeue.ids))
          AND (requeue.kinds IS NULL OR kind = ANY(requeue.kinds))
          AND (requeue.queues IS NULL OR queue = ANY(requeue.queues))
        RETURNING queue
      ), woken AS (
        SELECT %1$I.wake_up(%2$L, 'requeue', q.queue, 0) FROM (SELECT DISTINCT queue FROM requeued) q
      )
      -- woken is read so that it runs.
      SELECT r.n INTO n FROM (SELECT count(*)::int AS n FROM requeued) r, (SELECT count(*) FROM woken) w;
      RETURN n;
    END
    $body$, s, 'skiplock:' || s));

  -- cancel: the library's cancel. Queued jobs end cancelled at once; running
  -- ones get cancel_requested_at and their workers a control message (sent on
  -- commit), so the handler's signal fires and the job ends cancelled, attempts
  -- unchanged. Finished jobs are left alone. Every given filter must match;
  -- statuses narrows to queued or running; at least one filter is required.
  -- Returns one row: cancelled (queued jobs now cancelled) and running (running
  -- jobs asked to stop).
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.cancel(
      ids      bigint[] DEFAULT NULL,
      kinds    text[]   DEFAULT NULL,
      queues   text[]   DEFAULT NULL,
      statuses text[]   DEFAULT NULL,
      OUT cancelled int,
      OUT running   int
    )
    LANGUAGE plpgsql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS %3$L $f$, s, path, pg_catalog.format($body$
    #variable_conflict use_column
    DECLARE
      told_n bigint;
    BEGIN
      IF cancel.ids IS NULL AND cancel.kinds IS NULL AND cancel.queues IS NULL AND cancel.statuses IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
          MESSAGE = 'give ids, kinds, queues or statuses (cancel never means every job)';
      END IF;
      IF EXISTS (SELECT 1 FROM unnest(cancel.statuses) AS t(state)
                 WHERE t.state IS NULL OR t.state NOT IN ('queued', 'running')) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'statuses: must be queued or running';
      END IF;
      -- One statement for both: a job that starts running meanwhile cannot slip through.
      WITH hit AS (
        UPDATE %1$I.jobs j
        SET status = CASE WHEN j.status = 'queued' THEN 'cancelled' ELSE j.status END,
            finished_at = CASE WHEN j.status = 'queued' THEN now() ELSE j.finished_at END,
            cancel_requested_at = COALESCE(j.cancel_requested_at, now())
        WHERE j.status IN ('queued', 'running')
          AND j.status = ANY(COALESCE(cancel.statuses, ARRAY['queued', 'running']))
          AND (cancel.ids IS NULL OR j.id = ANY(cancel.ids))
          AND (cancel.kinds IS NULL OR j.kind = ANY(cancel.kinds))
          AND (cancel.queues IS NULL OR j.queue = ANY(cancel.queues))
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

  -- sweep: as the library's sweeper. A reclaimed job whose cancel was
  -- requested ends cancelled; the reclaim is recorded in the job's attempt
  -- history (newest 20) like a failed attempt. Same signature as before.
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.sweep(default_visibility_timeout_ms int DEFAULT 300000)
    RETURNS int
    LANGUAGE sql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS %3$L $f$, s, path, pg_catalog.format($body$
      WITH locked AS (
        SELECT pg_try_advisory_xact_lock(hashtextextended(%3$L, 0)) AS locked
      ), expired AS (
        SELECT id FROM %1$I.jobs
        WHERE (SELECT locked FROM locked)
          AND status = 'running'
          AND locked_at < now() - COALESCE(visibility_timeout_ms, sweep.default_visibility_timeout_ms)
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
      -- woken is read so that it runs.
      SELECT s.n FROM (SELECT count(*)::int AS n FROM swept) s, (SELECT count(*) FROM woken) w
    $body$, s, 'skiplock:' || s, 'skiplock:sweep:' || s));
END
$migration$;
