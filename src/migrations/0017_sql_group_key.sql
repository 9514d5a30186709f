-- skiplock migration 17: the SQL enqueue() takes group_key (text, last, NULL
-- by default), the library's groupKey: the key a queue's group limits count
-- the job under. Every existing call means what it did.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0017_sql_group_key.sql).

-- The function is in functions/sql-api.sql. As in migration 12, the changed
-- signature is dropped; sql/grants.sql grants the new one again.
DROP FUNCTION IF EXISTS enqueue(text, jsonb, text, int4, timestamptz, int4,
  text, text[], text[], timestamptz, int8[]);
