/**
 * How `drain` runs a transactional handler: as a worker does, in a
 * transaction on one connection of the Skiplock's pool, with the job's
 * completion committed in the same transaction.
 */
import type pg from 'pg';
import { HeldTransaction } from '../db/held-transaction.js';
import type { ClaimedJob } from '../db/queries/claim.js';
import { leaseKey } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { SuccessPolicy } from '../db/queries/results.js';
import { SkiplockError } from '../errors.js';
import type { Job } from '../job/job.js';
import { AttemptControl } from '../worker/attempt-control.js';
import type { RunOutcome } from '../worker/executor.js';
import type { TransactionalHandler } from '../worker/handler-definition.js';
import { runInTransaction } from '../worker/transactional.js';

/** Deadline of BEGIN, COMMIT and ROLLBACK in `drain`, in milliseconds. */
const STATEMENT_DEADLINE_MS = 30_000;

/**
 * Runs `handle` on `job` in a transaction and, when it succeeds, completes the
 * claim in it before COMMIT. A failure rolls back and is returned for the
 * caller to write.
 *
 * @throws {SkiplockError} (code `LEASE_LOST`) when the claim was reclaimed meanwhile (nothing committed).
 * @throws {DatabaseError} from the database.
 */
export async function drainTransactional(
  pool: pg.Pool,
  queries: JobQueries,
  claim: ClaimedJob,
  job: Job,
  handle: TransactionalHandler<string, unknown>,
  timeoutMs: number | undefined,
  workerId: string,
  onSuccess: SuccessPolicy,
): Promise<RunOutcome> {
  const tx = await HeldTransaction.checkOut(pool, STATEMENT_DEADLINE_MS, pool);
  const control = new AttemptControl();
  // A timed-out handler may still use the client: drop it rather than let its statements run outside.
  control.signal.addEventListener('abort', () => tx.destroy(control.reason, true), { once: true });
  try {
    await tx.begin();
    const outcome = await runInTransaction(tx, handle, job, control, timeoutMs);
    if (!outcome.ok) {
      await tx.rollback();
      return outcome;
    }
    const completed = await queries.results.complete(tx.client, [claim], workerId, onSuccess);
    if (!completed.has(leaseKey(claim))) {
      await tx.rollback();
      throw new SkiplockError('LEASE_LOST', `lease of job ${claim.id} was lost; nothing was committed`);
    }
    await tx.commit();
    return outcome;
  } finally {
    tx.release();
  }
}
