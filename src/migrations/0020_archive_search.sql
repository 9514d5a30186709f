-- skiplock migration 20: the archive searchable by tag and by payload field.
-- Runs with search_path set to the target schema (the migrator does this; with
-- psql: SET search_path TO skiplock; \i 0020_archive_search.sql).
--
-- Both are partitioned indexes: every day partition has its own, created with
-- it (existing partitions are indexed here, under the archive's lock, in
-- time that grows with the archived rows). IF NOT
-- EXISTS: an operator may build them beforehand, partition by partition and
-- CONCURRENTLY, under these names (docs/operations.md), and keep them.
--
-- fastupdate off: each archived job's entries go straight into the index.
-- With the pending list (the default) a search reads up to 4 MB of unsorted
-- entries in every partition not yet vacuumed, and one completion statement
-- in a few thousand pays for folding the list in; writing directly costs a
-- little on every insert instead, and a search reads only the matches.
--
-- Tag searches (`tags @> $1`: archived jobs having every given tag) go through
-- this index; archived jobs without tags are not in it.
CREATE INDEX IF NOT EXISTS jobs_archive_tags_idx ON jobs_archive USING gin (tags)
  WITH (fastupdate = off) WHERE tags IS NOT NULL;

-- Payload searches (`payload @> $1`, e.g. '{"customerId": 42}': archived jobs
-- whose payload contains these fields with these values). jsonb_path_ops holds
-- one hash per path to a value: smaller and faster to write than the default
-- jsonb_ops, and it serves exactly @>, the only operator the search uses.
CREATE INDEX IF NOT EXISTS jobs_archive_payload_idx ON jobs_archive USING gin (payload jsonb_path_ops)
  WITH (fastupdate = off);
