import { TEST_SCHEMA, type TestDatabase } from './database.js';

/**
 * Archives two succeeded jobs of `queue` (ids `firstId` + 1 and + 2) that
 * finished three days ago, in a day partition of their own, so that a prune
 * with a shorter archive retention drops that day whole.
 */
export async function archiveThreeDaysAgo(db: TestDatabase, queue: string, firstId: number): Promise<void> {
  await db.query(`SELECT "${TEST_SCHEMA}".archive_partition(current_date - 3)`);
  await db.query(
    `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                created_at, lease_seq, finished_at)
     SELECT $1::bigint + n, $2, 'k', '{}', 'succeeded', 0, now(), 1, 1, now(), 1, now() - interval '3 days'
     FROM generate_series(1, 2) n`,
    [firstId, queue],
  );
}
