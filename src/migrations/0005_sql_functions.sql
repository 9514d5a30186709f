-- skiplock migration 5: the queue as SQL functions, for psql, pg_cron, triggers
-- and any language: enqueue, requeue, sweep. Their effects are the library's,
-- wake-ups included: enqueue inserts (the insert trigger wakes workers on
-- commit), requeue and sweep call wake_up like the library's statements.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0005_sql_functions.sql).
--
-- Each function is SECURITY INVOKER (it runs with the caller's privileges) and
-- pins its search_path to pg_catalog, then this schema, then pg_temp last, so
-- that nothing a caller puts on its own search_path (a schema with a shadowing
-- `jobs` table or `now()` function, temporary objects) changes what it does.
-- The schema name, the channel and the sweeper's lock key are written into the
-- functions here, so they are created from a DO block.

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
  path text := pg_catalog.format('pg_catalog, %I, pg_temp', pg_catalog.current_schema());
BEGIN
  -- enqueue: one job, the defaults of the jobs table; returns its id. NULL for
  -- an optional argument means its default, as leaving it out does.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.enqueue(
      kind         text,
      payload      jsonb       DEFAULT '{}',
      queue        text        DEFAULT 'default',
      priority     int         DEFAULT 0,
      run_at       timestamptz DEFAULT now(),
      max_attempts int         DEFAULT 20
    ) RETURNS bigint
    LANGUAGE sql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
      INSERT INTO %1$I.jobs (kind, payload, queue, priority, run_at, max_attempts)
      VALUES (enqueue.kind,
              COALESCE(enqueue.payload, '{}'),
              COALESCE(enqueue.queue, 'default'),
              COALESCE(enqueue.priority, 0),
              COALESCE(enqueue.run_at, now()),
              COALESCE(enqueue.max_attempts, 20))
      RETURNING id
    $body$ $f$, s, path);

  -- requeue: dead and failed jobs back to queued (attempts 0, run_at now,
  -- last_error cleared), waking workers for their queues; returns how many.
  -- Every given filter must match; with none, every dead and failed job.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.requeue(
      ids      bigint[] DEFAULT NULL,
      kinds    text[]   DEFAULT NULL,
      queues   text[]   DEFAULT NULL,
      statuses text[]   DEFAULT NULL
    ) RETURNS int
    LANGUAGE sql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
      WITH requeued AS (
        UPDATE %1$I.jobs
        SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL
        WHERE status IN ('dead', 'failed')
          AND status = ANY(COALESCE(requeue.statuses, ARRAY['dead', 'failed']))
          AND (requeue.ids IS NULL OR id = ANY(requeue.ids))
          AND (requeue.kinds IS NULL OR kind = ANY(requeue.kinds))
          AND (requeue.queues IS NULL OR queue = ANY(requeue.queues))
        RETURNING queue
      ), woken AS (
        SELECT %1$I.wake_up(%3$L, 'requeue', q.queue, 0) FROM (SELECT DISTINCT queue FROM requeued) q
      )
      -- woken is read so that it runs.
      SELECT r.n FROM (SELECT count(*)::int AS n FROM requeued) r, (SELECT count(*) FROM woken) w
    $body$ $f$, s, path, 'skiplock:' || s);

  -- sweep: running jobs whose lease outlived their visibility timeout go back
  -- to queued (or dead when out of attempts), up to 1000 per call, under the
  -- sweeper's advisory lock; returns how many were reclaimed (0 when another
  -- sweep holds the lock). default_visibility_timeout_ms applies to rows set
  -- running without a timeout of their own.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.sweep(default_visibility_timeout_ms int DEFAULT 300000)
    RETURNS int
    LANGUAGE sql
    VOLATILE
    SECURITY INVOKER
    SET search_path = %2$s
    AS $body$
      WITH locked AS (
        SELECT pg_try_advisory_xact_lock(hashtextextended(%4$L, 0)) AS locked
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
        SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'queued' END,
            locked_at = NULL, locked_by = NULL, last_error = 'reclaimed: visibility timeout',
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
        WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
        RETURNING j.queue, j.status
      ), woken AS (
        SELECT %1$I.wake_up(%3$L, 'sweep', q.queue, 0)
        FROM (SELECT DISTINCT queue FROM swept WHERE status = 'queued') q
      )
      -- woken is read so that it runs.
      SELECT s.n FROM (SELECT count(*)::int AS n FROM swept) s, (SELECT count(*) FROM woken) w
    $body$ $f$, s, path, 'skiplock:' || s, 'skiplock:sweep:' || s);
END
$migration$;
