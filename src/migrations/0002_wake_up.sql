-- skiplock migration 2: one wake-up message format, sent by one function.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0002_wake_up.sql).

-- Every NOTIFY of skiplock goes through here, so the message has one shape:
-- {"type": ..., "queue": ..., "delayMs": ...}. A queue name too long for a
-- NOTIFY payload is sent as null ("any queue"). search_path is pinned so a
-- caller's search_path cannot redirect what it calls.
CREATE FUNCTION wake_up(p_channel text, p_type text, p_queue text, p_delay_ms bigint)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.pg_notify(
    p_channel,
    pg_catalog.json_build_object(
      'type', p_type,
      'queue', CASE WHEN pg_catalog.octet_length(p_queue) <= 1024 THEN p_queue END,
      'delayMs', GREATEST(p_delay_ms, 0)
    )::text)
$$;

-- The insert trigger sends the same message: functions/notifications.sql.
