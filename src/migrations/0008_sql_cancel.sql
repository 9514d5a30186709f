-- skiplock migration 8: the SQL functions catch up with the library. enqueue
-- takes a unique key (and the statuses that hold it), cancel is new, and
-- requeue takes cancelled jobs back as the library's does.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0008_sql_cancel.sql).
--
-- Their current definitions are in functions/sql-api.sql. Here the old
-- signatures of enqueue and requeue are dropped: a function with a new
-- signature replaces the old one rather than adding an overload (two enqueue
-- functions would make every call with fewer arguments ambiguous).

DROP FUNCTION IF EXISTS enqueue(text, jsonb, text, int4, timestamptz, int4);
DROP FUNCTION IF EXISTS requeue(int8[], text[], text[], text[]);
