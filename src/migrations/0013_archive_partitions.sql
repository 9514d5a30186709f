-- skiplock migration 13: the archive, partitioned by day of finished_at.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0013_archive_partitions.sql).
--
-- jobs_archive becomes a table partitioned by RANGE (finished_at), one
-- partition per UTC day named jobs_archive_pYYYYMMDD, so retention drops whole
-- days (no DELETE, no dead tuples). Rows whose finished_at is NULL, or falls
-- on a day without a partition, go to jobs_archive_default; when the day's
-- partition is created later, its rows move there from the default.
--
-- The columns, their order, defaults and the status CHECK stay as they were
-- (the table is recreated LIKE the old one), so INSERT INTO jobs_archive and
-- later ALTER TABLE jobs_archive ADD COLUMN work unchanged. A partitioned
-- table's primary key must include its partition key, and finished_at may be
-- NULL, so the archive has no primary key: ids are unique by construction (a
-- job's row moves here once, in the statement that deletes it from jobs), and
-- lookups by id use jobs_archive_id_idx.
--
-- The old rows are copied inside this migration's transaction. Only the
-- archive is locked meanwhile (ACCESS EXCLUSIVE from the rename to the
-- commit): completions with onSuccess 'archive' wait for the commit, every
-- other statement on jobs runs as usual. Plan for about a minute per 10
-- million archived rows.

ALTER TABLE jobs_archive RENAME TO jobs_archive_unpartitioned;
ALTER INDEX jobs_archive_pkey RENAME TO jobs_archive_unpartitioned_pkey;
ALTER INDEX jobs_archive_finished_at_idx RENAME TO jobs_archive_unpartitioned_finished_at_idx;

CREATE TABLE jobs_archive (
  LIKE jobs_archive_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE
) PARTITION BY RANGE (finished_at);

-- Partitioned indexes: each partition gets its own, created with it.
CREATE INDEX jobs_archive_id_idx ON jobs_archive (id);
CREATE INDEX jobs_archive_finished_at_idx ON jobs_archive (finished_at);
-- The dashboard's archive browser: newest first within a kind or a queue.
CREATE INDEX jobs_archive_kind_idx ON jobs_archive (kind, finished_at);
CREATE INDEX jobs_archive_queue_idx ON jobs_archive (queue, finished_at);

CREATE TABLE jobs_archive_default PARTITION OF jobs_archive DEFAULT;

DO $migration$
DECLARE
  s text := pg_catalog.current_schema();
BEGIN
  -- Creates the partition of one UTC day unless it exists; rows of that day
  -- already in the default partition move into it first (a partition cannot
  -- be attached while the default holds rows of its range). The new table is
  -- built apart and attached, which takes only SHARE UPDATE EXCLUSIVE on the
  -- archive: inserts into it go on meanwhile.
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.archive_partition(p_day date) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS %2$L $f$, s, pg_catalog.format($body$
    DECLARE
      part text := 'jobs_archive_p' || pg_catalog.to_char(p_day, 'YYYYMMDD');
      lo text := pg_catalog.to_char(p_day, 'YYYY-MM-DD') || ' 00:00:00+00';
      hi text := pg_catalog.to_char(p_day + 1, 'YYYY-MM-DD') || ' 00:00:00+00';
    BEGIN
      IF pg_catalog.to_regclass(pg_catalog.format('%%I.%%I', %1$L, part)) IS NOT NULL THEN
        RETURN false;
      END IF;
      EXECUTE pg_catalog.format(
        'CREATE TABLE %%I.%%I (LIKE %%I.jobs_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
        %1$L, part, %1$L);
      EXECUTE pg_catalog.format(
        'WITH moved AS (DELETE FROM %%I.jobs_archive_default WHERE finished_at >= $1::timestamptz AND finished_at < $2::timestamptz RETURNING *)
         INSERT INTO %%I.%%I SELECT * FROM moved', %1$L, %1$L, part)
        USING lo, hi;
      EXECUTE pg_catalog.format(
        'ALTER TABLE %%I.jobs_archive ATTACH PARTITION %%I.%%I FOR VALUES FROM (%%L) TO (%%L)',
        %1$L, %1$L, part, lo, hi);
      RETURN true;
    END
    $body$, s));

  -- Partition upkeep, called by the maintenance loop: creates the partitions
  -- of the UTC day of p_now and the p_ahead_days after it, and with
  -- p_retention_ms drops every day partition whose whole day ended more than
  -- p_retention_ms before p_now. Partitions not named jobs_archive_pYYYYMMDD
  -- and the default are never dropped. Dropping a partition takes ACCESS
  -- EXCLUSIVE on the archive for an instant; a drop that cannot get it within
  -- the lock timeout is left for the next call (skipped counts it). SECURITY
  -- DEFINER: DDL needs the archive's owner, and a worker role needs only
  -- EXECUTE on this function (sql/grants.sql).
  EXECUTE pg_catalog.format($f$
    CREATE FUNCTION %1$I.archive_partitions(p_now timestamptz, p_ahead_days int, p_retention_ms bigint,
      OUT created int, OUT dropped int, OUT skipped int)
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1s'
    AS %2$L $f$, s, pg_catalog.format($body$
    DECLARE
      today date := (p_now AT TIME ZONE 'UTC')::date;
      part record;
    BEGIN
      created := 0;
      dropped := 0;
      skipped := 0;
      FOR d IN 0 .. GREATEST(p_ahead_days, 0) LOOP
        IF %1$I.archive_partition(today + d) THEN
          created := created + 1;
        END IF;
      END LOOP;
      IF p_retention_ms IS NULL THEN
        RETURN;
      END IF;
      FOR part IN
        SELECT c.relname
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = pg_catalog.format('%%I.jobs_archive', %1$L)::regclass
          AND c.relname ~ '^jobs_archive_p[0-9]{8}$'
          AND (pg_catalog.to_date(pg_catalog.substr(c.relname, 15), 'YYYYMMDD') + 1)::timestamp
              <= (p_now - p_retention_ms * interval '1 millisecond') AT TIME ZONE 'UTC'
        ORDER BY c.relname
      LOOP
        BEGIN
          EXECUTE pg_catalog.format('DROP TABLE %%I.%%I', %1$L, part.relname);
          dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
          skipped := skipped + 1;
        END;
      END LOOP;
    END
    $body$, s));
END
$migration$;

REVOKE EXECUTE ON FUNCTION archive_partition(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION archive_partitions(timestamptz, int, bigint) FROM PUBLIC;

-- A partition for every UTC day the old archive holds (found through its
-- finished_at index, one probe per day), then the rows, then the old table.
SELECT archive_partition(d.day)
FROM (
  WITH RECURSIVE days(day) AS (
    SELECT (min(finished_at) AT TIME ZONE 'UTC')::date FROM jobs_archive_unpartitioned
    UNION ALL
    SELECT (SELECT (min(a.finished_at) AT TIME ZONE 'UTC')::date
            FROM jobs_archive_unpartitioned a
            WHERE a.finished_at >= ((days.day + 1)::timestamp AT TIME ZONE 'UTC'))
    FROM days WHERE days.day IS NOT NULL
  )
  SELECT day FROM days WHERE day IS NOT NULL
) d;
SELECT archive_partitions(now(), 7, NULL);

INSERT INTO jobs_archive SELECT * FROM jobs_archive_unpartitioned;
DROP TABLE jobs_archive_unpartitioned;
