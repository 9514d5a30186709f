-- skiplock migration 27: the SQL function enqueue() refuses a start_by not
-- after both run_at and now, as the library refuses a startBy not after runAt:
-- such a job could only expire. Nothing in the tables changes; this
-- version exists so that databases already at 26 run the function files again.
SELECT 1;
