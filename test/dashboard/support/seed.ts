/**
 * A seeded jobs table with known counts, for the dashboard tests: jobs are
 * enqueued through the library, then moved to their status with plain SQL.
 */
import type { TestDatabase } from '../../support/database.js';

/** The seed's counts per queue and status (statuses not listed are 0). */
export const SEEDED = {
  emails: { waiting: 0, queued: 3, running: 1, succeeded: 0, failed: 1, dead: 2, cancelled: 0 },
  media: { waiting: 0, queued: 2, running: 0, succeeded: 4, failed: 0, dead: 1, cancelled: 0 },
} as const;

/** Ids of the seeded jobs by status. */
export interface Seeded {
  ids: Record<'queued' | 'running' | 'succeeded' | 'failed' | 'dead', string[]>;
}

/**
 * Seeds {@link SEEDED}. Succeeded and dead jobs finished 2, 3, … minutes ago;
 * the oldest queued job of `emails` has been due for 90 s.
 */
export async function seed(db: TestDatabase): Promise<Seeded> {
  const skiplock = db.skiplock();
  const ids: Seeded['ids'] = { queued: [], running: [], succeeded: [], failed: [], dead: [] };
  let minutes = 2;
  for (const [queue, counts] of Object.entries(SEEDED)) {
    for (const [status, count] of Object.entries(counts) as [keyof Seeded['ids'], number][]) {
      for (let i = 0; i < count; i++) {
        const kind = status === 'dead' || status === 'failed' ? 'send_invoice_email' : 'resize_image';
        const job = await skiplock.enqueue(kind, { n: i, queue, status }, { queue, maxAttempts: 3 });
        ids[status].push(job.id);
        if (status === 'queued') continue;
        const finished = status === 'succeeded' || status === 'dead' || status === 'failed';
        await db.query(
          `UPDATE ${db.jobs} SET status = $2, attempts = $3,
             last_error = $4, locked_by = $5, locked_at = CASE WHEN $5::text IS NULL THEN NULL ELSE now() END,
             finished_at = CASE WHEN $6 THEN now() - make_interval(mins => $7) END
           WHERE id = $1`,
          [
            job.id,
            status,
            status === 'dead' ? 3 : 1,
            status === 'dead' || status === 'failed' ? 'Error: SMTP 421 too many connections' : null,
            status === 'running' ? 'host-a:4242:w1' : null,
            finished,
            minutes++,
          ],
        );
      }
    }
  }
  await db.query(`UPDATE ${db.jobs} SET run_at = now() - interval '90 seconds' WHERE id = $1`, [
    ids.queued[0],
  ]);
  return { ids };
}
