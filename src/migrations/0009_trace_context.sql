-- skiplock migration 9: the trace context a job was enqueued in (OpenTelemetry).
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0009_trace_context.sql).

-- The propagation fields of the enqueueing span (W3C `traceparent`,
-- `tracestate`, and whatever else the registered propagator writes), as a JSON
-- object of strings; NULL when the job was enqueued without tracing. Written
-- only by a Skiplock with tracing on, read only by its workers. Adding a
-- nullable column without a default rewrites no rows.
ALTER TABLE jobs ADD COLUMN trace_context jsonb;
-- The archive keeps the columns of the jobs table.
ALTER TABLE jobs_archive ADD COLUMN trace_context jsonb;
