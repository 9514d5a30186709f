-- skiplock migration 19: relays register themselves, so stats() and the
-- dashboard know which queues are relayed and which running jobs a relay holds.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0019_relays.sql).

-- One row per relay process (its id is the locked_by of the jobs it holds).
-- The relay writes its row when it starts and again every few seconds
-- (expires_at moves on); a stopped relay deletes it; a killed one's row expires
-- and is deleted by the next relay that registers, an hour later.
CREATE TABLE relays (
  id            text        PRIMARY KEY,
  queues        text[]      NOT NULL,
  target        text        NOT NULL,
  published     bigint      NOT NULL DEFAULT 0,
  started_at    timestamptz NOT NULL DEFAULT now(),
  heartbeat_at  timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz NOT NULL
);
