-- skiplock: the least privileges of a producer role, a worker role and,
-- optionally, a read-only role (a read-only dashboard, monitoring).
--
-- Run as the owner of the skiplock schema (the role that ran `skiplock migrate`),
-- after every migration (GRANT and REVOKE are idempotent), with psql:
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 \
--        -v schema=skiplock -v producer_role=app_producer -v worker_role=app_worker \
--        [-v reader_role=app_reader] -f sql/grants.sql
--
-- The roles must exist (CREATE ROLE app_worker LOGIN PASSWORD '…'). Every name is
-- an identifier variable (:"name"), so psql quotes it: any schema or role name
-- works and none is ever executed as SQL. See docs/security.md.

\set ON_ERROR_STOP on

-- Neither role may create, alter or drop anything: no CREATE on the schema,
-- no ownership. Both may look up objects in it.
GRANT USAGE ON SCHEMA :"schema" TO :"producer_role", :"worker_role";

-- `migrate()` at start-up only reads the version when the schema is current.
GRANT SELECT ON TABLE :"schema".migrations TO :"producer_role", :"worker_role";

-- Producer: enqueue (INSERT … RETURNING the job, which needs SELECT on the
-- returned columns), getJob, listJobs and stats (SELECT). It cannot claim,
-- complete, fail, requeue, delete or truncate jobs. Its INSERT names only the
-- columns an enqueue sets, so every job it makes starts queued, with no lease,
-- attempts or result (a table-level INSERT granted by an older version of this
-- script is revoked first); the table's insert guard refuses such a row from
-- any role without UPDATE on jobs as well.
REVOKE INSERT ON TABLE :"schema".jobs FROM :"producer_role";
GRANT SELECT ON TABLE :"schema".jobs TO :"producer_role";
GRANT INSERT (kind, queue, payload, priority, run_at, max_attempts, max_attempts_default,
              unique_key, unique_states, trace_context, tags, start_by, group_key, on_success)
  ON TABLE :"schema".jobs TO :"producer_role";

-- Worker: claim (SELECT … FOR UPDATE SKIP LOCKED, UPDATE), heartbeat, fail,
-- release, sweep and requeue (UPDATE), complete with onSuccess 'delete'
-- (DELETE) or 'keep' (UPDATE), enqueue from a handler (INSERT).
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".jobs TO :"worker_role";

-- Worker with onSuccess 'archive': the archive insert returns the ids it moved;
-- retention (prune, worker option retentionMs) deletes old archived rows.
GRANT SELECT, INSERT, DELETE ON TABLE :"schema".jobs_archive TO :"worker_role";

-- Dependencies (dependsOn): the worker role enqueues children (INSERT, and
-- UPDATE of the parents' marker on jobs), and every statement that ends a
-- parent records it on the edges and releases the children (triggers running
-- as the caller); deleting a child deletes its edges. A producer role cannot
-- enqueue jobs with dependsOn (they start `waiting`, which takes UPDATE on jobs).
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".job_dependencies TO :"worker_role";
GRANT SELECT ON TABLE :"schema".job_dependencies TO :"producer_role";

-- Queues: every claim reads which queues are paused; the claim of a limited
-- queue locks its row (SELECT … FOR UPDATE) and records starts in it (UPDATE);
-- the worker role also pauses, resumes and limits them (operator tasks, like
-- requeue). The producer lists them.
GRANT SELECT ON TABLE :"schema".queues TO :"producer_role";
GRANT SELECT, INSERT, UPDATE ON TABLE :"schema".queues TO :"worker_role";
-- The grouped claim keeps each key's recent starts (a per-key rate).
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".group_rate_slots TO :"worker_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".relays TO :"worker_role";
GRANT SELECT ON TABLE :"schema".relays TO :"producer_role";

-- A producer that enqueues with onConflict 'replace' (debounce) rewrites the
-- payload, priority, run_at and max_attempts (and whether it was given) of a
-- queued job holding the same unique key ('skip', the default, only reads the
-- holder). The grant also lets the producer lock job rows (SELECT … FOR
-- UPDATE), so it is not given by default; uncomment it if your producers
-- debounce:
-- GRANT UPDATE (payload, priority, run_at, max_attempts, max_attempts_default) ON TABLE :"schema".jobs TO :"producer_role";

-- A producer that waits for jobs (waitFor) marks them as awaited. Like the
-- grant above, it also lets the producer lock job rows, so it is not given by
-- default; uncomment it if your producers wait:
-- GRANT UPDATE (awaited) ON TABLE :"schema".jobs TO :"producer_role";

-- Schedules: the producer creates, updates, lists and removes them; a worker's
-- scheduler locks due schedules (SELECT … FOR UPDATE) and advances them. A
-- schedule row only names what to enqueue (kind, payload, queue, priority,
-- max_attempts) and when; the scheduler enqueues its jobs queued, as an enqueue
-- does, so a producer gets nothing through a schedule it could not enqueue.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".schedules TO :"producer_role";
GRANT SELECT, UPDATE ON TABLE :"schema".schedules TO :"worker_role";

-- SQL functions (for psql, pg_cron, triggers). They run with the caller's
-- rights, so the table grants above decide what a role can do through them:
-- the producer enqueues; requeue, sweep and cancel update jobs, so they are the
-- worker role's. wake_up and control send the NOTIFY messages of the library's
-- statements and of these functions. PostgreSQL lets every role execute a new
-- function unless that default was revoked; these grants work either way.
GRANT EXECUTE ON FUNCTION
  :"schema".enqueue(text, jsonb, text, int, timestamptz, int, text, text[], text[], timestamptz, bigint[], text),
  :"schema".wake_up(text, text, text, bigint)
  TO :"producer_role", :"worker_role";
GRANT EXECUTE ON FUNCTION
  :"schema".requeue(bigint[], text[], text[], text[], boolean, text[]),
  :"schema".sweep(int),
  :"schema".cancel(bigint[], text[], text[], text[], text[]),
  :"schema".control(text, text, text, bigint[])
  TO :"worker_role";
-- The archive's partition upkeep (worker maintenance, prune): creates day
-- partitions ahead and drops expired ones. It runs with its owner's rights
-- (SECURITY DEFINER: DDL needs the archive's owner) and is not PUBLIC's.
GRANT EXECUTE ON FUNCTION :"schema".archive_partitions(timestamptz, int, bigint) TO :"worker_role";
-- The insert of a job with dependsOn (library and enqueue(…, depends_on)).
GRANT EXECUTE ON FUNCTION :"schema".jobs_prepare_child(bigint[], text) TO :"worker_role";

-- Reader (optional, -v reader_role=…): reads everything skiplock keeps and
-- changes nothing: getJob, listJobs, stats, queues, schedules, the archive, and
-- a dashboard with readOnly: true (`skiplock dashboard --read-only`).
\if :{?reader_role}
GRANT USAGE ON SCHEMA :"schema" TO :"reader_role";
GRANT SELECT ON TABLE
  :"schema".jobs, :"schema".jobs_archive, :"schema".queues, :"schema".schedules, :"schema".migrations,
  :"schema".job_dependencies, :"schema".relays
  TO :"reader_role";
\endif
