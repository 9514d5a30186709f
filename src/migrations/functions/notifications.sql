-- skiplock functions: the messages the jobs table sends, and their triggers.
-- Runs after the versioned migrations, in their transaction, whenever a
-- migration run applies one, with search_path set to the target schema (with
-- psql, after the numbered files: SET search_path TO skiplock;
-- \i functions/notifications.sql). Every statement replaces what an earlier version
-- made, so running it again changes nothing.

-- Wake workers when jobs are inserted, by any means (the library, psql, a
-- trigger, another language). NOTIFY is delivered on commit and dropped on
-- rollback. One wake-up per queue per statement, in the one message format of
-- wake_up, with the delay until the queue's earliest job is due (database
-- clock). search_path holds pg_catalog only: the body names this schema's
-- objects qualified, so nothing planted in the schema is ever called.
DO $functions$
DECLARE
  s text := pg_catalog.current_schema();
BEGIN
  EXECUTE pg_catalog.format($f$
    CREATE OR REPLACE FUNCTION %1$I.jobs_notify() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS %2$L $f$, s, pg_catalog.format($body$
    BEGIN
      PERFORM %1$I.wake_up('skiplock:' || TG_TABLE_SCHEMA::text, 'insert', q.queue, q.delay_ms)
      FROM (
        SELECT n.queue,
               GREATEST(0, CEIL(EXTRACT(EPOCH FROM MIN(n.run_at) - now()) * 1000))::bigint AS delay_ms
        FROM new_jobs n
        WHERE n.status = 'queued'
        GROUP BY n.queue, n.run_at <= now()
      ) q;
      RETURN NULL;
    END
    $body$, s));
END
$functions$;

DROP TRIGGER IF EXISTS jobs_notify ON jobs;
CREATE TRIGGER jobs_notify
  AFTER INSERT ON jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();

-- The completion message of an awaited job: the wake-up format with type
-- 'done' and the job's id, on the channel 'skipdone:<schema>' (as long as the
-- wake-up channel, so it fits PostgreSQL's 63 bytes for every schema name
-- allowed). Waiters read the job's state from the table; a job gone from both
-- tables ended by its success.
CREATE OR REPLACE FUNCTION jobs_done_notify() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('skipdone:' || TG_TABLE_SCHEMA,
                    json_build_object('type', 'done', 'queue', NULL, 'delayMs', 0,
                                      'ids', json_build_array(OLD.id::text))::text);
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS jobs_done_update ON jobs;
CREATE TRIGGER jobs_done_update AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN (OLD.awaited AND NEW.status IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_done_notify();

DROP TRIGGER IF EXISTS jobs_done_delete ON jobs;
CREATE TRIGGER jobs_done_delete AFTER DELETE ON jobs FOR EACH ROW
  WHEN (OLD.awaited AND OLD.status NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
  EXECUTE FUNCTION jobs_done_notify();
