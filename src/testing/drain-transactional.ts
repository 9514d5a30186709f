/**
 * How `drain` runs a transactional handler: as a worker does, in a
 * transaction with the job's completion (the finish statement) committed in
 * it — a transaction on one connection of the Skiplock's pool, or, when
 * `drain` runs inside the caller's transaction, a savepoint of it.
 */
import type pg from 'pg';
import { type Queryable, translateError } from '../db/executor.js';
import { HeldTransaction } from '../db/held-transaction.js';
import type { ClaimedJob } from '../db/queries/claim.js';
import type { FinishingJob, SuccessPolicy } from '../db/queries/finish.js';
import { leaseKey } from '../db/queries/job-row.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { SkiplockError } from '../errors.js';
import type { Job } from '../job/job.js';
import { AttemptControl, failure, type RunOutcome } from '../worker/executor.js';
import type { TransactionalHandler } from '../worker/handler-definition.js';
import { finishing, runInTransaction } from '../worker/transactional.js';
import { DEFAULT_MAX_RESULT_BYTES, successToWrite } from '../workflow/job-output.js';

/** Deadline of BEGIN, COMMIT and ROLLBACK in `drain`, in milliseconds. */
const STATEMENT_DEADLINE_MS = 30_000;

/** Where a transactional attempt runs, and what it needs. */
export interface DrainTransactionalContext {
  /** The Skiplock's pool: a transaction of its own per attempt. */
  pool: pg.Pool;
  /** The caller's connection inside its transaction: a savepoint per attempt instead. */
  client: Queryable | undefined;
  queries: JobQueries;
  workerId: string;
  onSuccess: SuccessPolicy;
}

/**
 * Runs `handle` on `job` in a transaction (or a savepoint) and, when it
 * succeeds, finishes the claim in it: the handler's writes and the job's
 * completion commit together. A failure rolls back and is returned for the
 * caller to write; a job whose cancel was requested ends `cancelled`, its
 * handler's writes rolled back.
 *
 * @returns the attempt's outcome, or `'cancelled'`.
 * @throws {SkiplockError} (code `LEASE_LOST`) when the claim was reclaimed meanwhile (nothing committed).
 * @throws {DatabaseError} from the database.
 */
export async function drainTransactional(
  ctx: DrainTransactionalContext,
  claim: ClaimedJob,
  job: Job,
  handle: TransactionalHandler<string, unknown>,
  timeoutMs: number | undefined,
): Promise<RunOutcome | 'cancelled'> {
  const control = new AttemptControl();
  control.parentsOf = (id) => ctx.queries.dependencies.parents(ctx.client ?? ctx.pool, id);
  if (ctx.client) return inSavepoint(ctx, ctx.client, claim, job, handle, control, timeoutMs);
  const tx = await HeldTransaction.checkOut(ctx.pool, STATEMENT_DEADLINE_MS, ctx.pool);
  // A timed-out handler may still use the client: drop it rather than let its statements run outside.
  control.signal.addEventListener('abort', () => tx.destroy(control.reason, true), { once: true });
  try {
    await tx.begin();
    const outcome = await runInTransaction(tx.client, handle, job, control, timeoutMs);
    const success = outcome.ok ? succeeded(ctx, claim, outcome) : outcome;
    if (!success.ok) {
      await tx.rollback();
      return success;
    }
    const written = await ctx.queries.finish.finish(
      tx.client,
      [success.finishing],
      ctx.workerId,
      ctx.onSuccess,
    );
    if (written.get(leaseKey(claim))?.outcome === 'succeeded') {
      await tx.commit();
      return outcome;
    }
    await tx.rollback();
    return await cancelOrLost(ctx, ctx.pool, claim);
  } finally {
    tx.release();
  }
}

/** The savepoint each attempt of a `drain` inside the caller's transaction runs in. */
const SAVEPOINT = 'skiplock_drain_attempt';

async function inSavepoint(
  ctx: DrainTransactionalContext,
  client: Queryable,
  claim: ClaimedJob,
  job: Job,
  handle: TransactionalHandler<string, unknown>,
  control: AttemptControl,
  timeoutMs: number | undefined,
): Promise<RunOutcome | 'cancelled'> {
  await query(client, `SAVEPOINT ${SAVEPOINT}`);
  // The handler gets the caller's connection: its statements are refused once the attempt is over.
  const outcome = await runInTransaction(client as pg.PoolClient, handle, job, control, timeoutMs);
  const success = outcome.ok ? succeeded(ctx, claim, outcome) : outcome;
  if (!success.ok) {
    await query(client, `ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
    return success;
  }
  const written = await ctx.queries.finish.finish(client, [success.finishing], ctx.workerId, ctx.onSuccess);
  if (written.get(leaseKey(claim))?.outcome === 'succeeded') {
    await query(client, `RELEASE SAVEPOINT ${SAVEPOINT}`);
    return outcome;
  }
  await query(client, `ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
  return cancelOrLost(ctx, client, claim);
}

/**
 * What the success of `claim` writes, as the worker's transactional path
 * writes it (the handler's result, the job's own success policy); a result
 * that cannot be stored is the attempt's failure.
 */
function succeeded(
  ctx: DrainTransactionalContext,
  claim: ClaimedJob,
  outcome: RunOutcome & { ok: true },
): { ok: true; finishing: FinishingJob } | (RunOutcome & { ok: false }) {
  try {
    const success = successToWrite(outcome.value, claim.onSuccess, ctx.onSuccess, DEFAULT_MAX_RESULT_BYTES);
    return { ok: true, finishing: { ...finishing(claim, 'succeeded'), ...success } };
  } catch (error) {
    return failure(error) as RunOutcome & { ok: false };
  }
}

/** A completion that wrote no success: the job ends `cancelled` when its cancel was requested, else the lease was lost. */
async function cancelOrLost(
  ctx: DrainTransactionalContext,
  db: Queryable,
  claim: ClaimedJob,
): Promise<'cancelled'> {
  const written = await ctx.queries.finish.finish(
    db,
    [finishing(claim, 'cancelled')],
    ctx.workerId,
    ctx.onSuccess,
  );
  if (written.has(leaseKey(claim))) return 'cancelled';
  throw new SkiplockError('LEASE_LOST', `lease of job ${claim.id} was lost; nothing was committed`);
}

async function query(db: Queryable, text: string): Promise<void> {
  try {
    await db.query(text);
  } catch (error) {
    throw translateError(error);
  }
}
