-- skiplock migration 10: hardening. Functions resolve nothing from this
-- schema by search path; a plain insert without max_attempts lets the kind
-- decide, as the SQL enqueue does; only a role that may update jobs may insert
-- one that is not freshly queued.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0010_hardening.sql). pg_catalog, not
-- named in that path, is searched before it.

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
BEGIN
  -- Every function and trigger of this schema runs with search_path
  -- pg_catalog, pg_temp: this schema is not on it, so nothing a role with
  -- CREATE here plants (a now(), a ceil(), an operator on types pg_catalog has
  -- no exact match for) is ever called by another role's insert or call. Their
  -- bodies name this schema's objects qualified.

  -- The insert trigger and the SQL functions of migrations 5 and 8: see
  -- functions/notifications.sql and functions/sql-api.sql.

  -- A plain INSERT that leaves max_attempts out behaves as enqueue() without
  -- it: the row reads 20, marked as a default, so a kind's maxAttempts replaces
  -- it at the claim. "Left out" must be told apart from "given as 20", which a
  -- column default of 20 cannot do, so the column's default becomes NULL and a
  -- BEFORE INSERT trigger fills in 20 (the NOT NULL check runs after it, so no
  -- row ever holds NULL: what readers see is as before). Its WHEN clause spares
  -- every insert that names the column (all of the library's and enqueue()'s)
  -- the call. The claim statements do not change: the default claim costs what
  -- it did, and the claim that applies kinds' maxAttempts reads the flag it
  -- already read.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.jobs_max_attempts_default() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
      NEW.max_attempts := 20;
      NEW.max_attempts_default := true;
      RETURN NEW;
    END
    $body$ $f$, s);
END
$migration$;

ALTER TABLE jobs ALTER COLUMN max_attempts DROP DEFAULT;

CREATE TRIGGER jobs_max_attempts_default
  BEFORE INSERT ON jobs
  FOR EACH ROW
  WHEN (NEW.max_attempts IS NULL)
  EXECUTE FUNCTION jobs_max_attempts_default();

-- An insert makes a queued job without a lease or a result: a row in any other
-- state (running with an invented lease, succeeded, dead, …) is an insert and
-- an update at once, so it takes the right to update jobs (the owner's, the
-- worker role's). A producer role, which may only insert, cannot forge one
-- whatever columns it was granted. The WHEN clause is false for every insert
-- of the library and of enqueue(), so they never call the function.
DO $migration$
BEGIN
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.jobs_insert_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
    BEGIN
      IF NOT pg_catalog.has_table_privilege(TG_RELID, 'UPDATE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
          MESSAGE = 'permission denied: a role without UPDATE on the jobs table inserts only queued jobs'
                    ' without lease, attempts or result (status, attempts, lease_seq, locked_at, locked_by,'
                    ' visibility_timeout_ms, finished_at, cancel_requested_at, last_error, errors left out)';
      END IF;
      RETURN NEW;
    END
    $body$ $f$, pg_catalog.current_schema());
END
$migration$;

CREATE TRIGGER jobs_insert_guard
  BEFORE INSERT ON jobs
  FOR EACH ROW
  WHEN (NEW.status IS DISTINCT FROM 'queued'
        OR NEW.attempts IS DISTINCT FROM 0
        OR NEW.lease_seq IS DISTINCT FROM 0
        OR NEW.locked_at IS NOT NULL
        OR NEW.locked_by IS NOT NULL
        OR NEW.visibility_timeout_ms IS NOT NULL
        OR NEW.finished_at IS NOT NULL
        OR NEW.cancel_requested_at IS NOT NULL
        OR NEW.last_error IS NOT NULL
        OR NEW.errors IS NOT NULL)
  EXECUTE FUNCTION jobs_insert_guard();
