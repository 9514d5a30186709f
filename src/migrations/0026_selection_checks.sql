-- skiplock migration 26: the SQL functions requeue() and cancel() check their
-- selection with one shared text (functions/sql-api.sql). Nothing in the
-- tables changes; this version exists so that databases already at 25 run the
-- function files again. The checks refuse what they refused before, with the
-- same messages; cancel() now reads its tags through the same check as
-- enqueue() and requeue().
SELECT 1;
