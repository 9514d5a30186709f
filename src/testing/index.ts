/**
 * Helpers for users' tests: run the jobs a test enqueued, in-process and to
 * completion, without starting a worker (`drain`), and look at what is queued
 * (`enqueued`). Both run on the Skiplock's own database, so what they see is
 * what a worker would.
 *
 * @example
 * import { drain, enqueued } from 'skiplock/testing';
 *
 * it('sends the invoice email', async () => {
 *   await placeOrder(42);
 *   expect(await enqueued(skiplock, { kind: 'send_invoice_email' })).toHaveLength(1);
 *   const result = await drain(skiplock, { send_invoice_email: sendInvoiceEmail });
 *   expect(result).toMatchObject({ succeeded: 1, failed: 0 });
 * });
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { ClaimedJob, KindMaxAttempts } from '../db/queries/claim.js';
import { JobQueries } from '../db/queries/jobs.js';
import type { SuccessPolicy } from '../db/queries/results.js';
import { SkiplockError, ValidationError } from '../errors.js';
import { DEFAULT_VISIBILITY_TIMEOUT_MS } from '../job/defaults.js';
import type { Job, JobMap, JobRecord } from '../job/job.js';
import type { Skiplock } from '../skiplock.js';
import { AttemptControl } from '../worker/attempt-control.js';
import { type Middleware, runJob, withMiddleware } from '../worker/executor.js';
import { kindMaxAttemptsOf, kindRetryDelayMs, resolveHandlers } from '../worker/handler-definition.js';
import type { Handlers } from '../worker/options.js';
import { failOrSnooze } from '../worker/result-writer.js';
import { drainTransactional } from './drain-transactional.js';

/** Which jobs {@link drain} runs. */
export interface DrainOptions<Jobs extends JobMap = JobMap> {
  /** Only jobs of these kinds. @default every kind in `handlers` */
  kinds?: (keyof Jobs & string)[];
  /** Only jobs of this queue (or these queues). @default every queue */
  queue?: string | string[];
  /** What happens to a succeeded job, as the worker option of that name. @default 'delete' */
  onSuccess?: SuccessPolicy;
  /**
   * Most attempts one call runs; past it, {@link drain} throws, since handlers
   * that keep enqueueing due jobs would never let it finish. @default 10_000
   */
  maxJobs?: number;
  /** Hooks around every attempt, as the worker option of that name. @default [] */
  middleware?: Middleware[];
}

/** One attempt {@link drain} ran, and what the job became. */
export interface DrainedJob {
  job: Job;
  /**
   * `succeeded`; `snoozed` (the handler threw a SnoozeError: queued again after
   * its delay, the attempt not charged); or after a failure: `queued` (a retry,
   * due after its backoff), `failed` or `dead`.
   */
  status: 'succeeded' | 'snoozed' | 'queued' | 'failed' | 'dead';
  /** What the handler threw, as stored in `last_error` (failures only). */
  error?: string;
}

/** What {@link drain} ran. */
export interface DrainResult {
  /** Attempts that succeeded. */
  succeeded: number;
  /** Attempts that failed (retried later, failed, or dead). */
  failed: number;
  /** Attempts that snoozed their job (due again after the delay, not charged). */
  snoozed: number;
  /** Every attempt, in the order run. */
  jobs: DrainedJob[];
}

/** Jobs claimed per round trip. */
const DRAIN_BATCH = 100;

/**
 * Runs every due job of the given kinds to completion, one at a time, in this
 * process: claims them as a worker does (attempts count, leases, results and
 * retries are the worker's), so it also runs due jobs the handlers enqueue.
 * A failed attempt is retried with backoff as usual, and a snoozed job is due
 * after its delay, so neither runs again in this call unless it is already due
 * (a snooze of 0 ms runs again at once). Queues with limits are claimed
 * within them, as a worker would: once a rate allows no more starts, their
 * jobs are left for a later call. Resolves when no due job of those kinds is
 * left (or none may start).
 *
 * @throws {SkiplockError} (code `DRAIN_LIMIT`) after `maxJobs` attempts.
 * @throws {ValidationError} naming `options.middleware` when it is not an array of functions.
 * @throws {DatabaseError} from the database.
 */
export async function drain<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  handlers: Handlers<Jobs>,
  options: DrainOptions<Jobs> = {},
): Promise<DrainResult> {
  const queries = new JobQueries(skiplock.schema);
  const pool = skiplock.pool;
  const middleware = options.middleware ?? [];
  if (!Array.isArray(middleware) || middleware.some((m) => typeof m !== 'function'))
    throw new ValidationError('options.middleware', 'must be an array of functions');
  const byKind = withMiddleware(resolveHandlers(handlers as Record<string, unknown>, 'handlers'), middleware);
  const kindMaxAttempts = kindMaxAttemptsOf(byKind);
  const kinds: string[] = options.kinds ?? [...byKind.keys()];
  const maxJobs = options.maxJobs ?? 10_000;
  const workerId = `skiplock-testing:${process.pid}:${randomBytes(4).toString('hex')}`;
  const result: DrainResult = { succeeded: 0, failed: 0, snoozed: 0, jobs: [] };
  if (kinds.length === 0) return result;
  for (;;) {
    const queues = await queuesOf(skiplock, kinds, options.queue);
    const claimed =
      queues.length === 0
        ? []
        : await claimFor(queries, skiplock.pool, queues, kinds, workerId, kindMaxAttempts);
    if (claimed.length === 0) return result;
    for (const claim of claimed) {
      if (result.jobs.length >= maxJobs) {
        await queries.results.release(pool, claimed.slice(claimed.indexOf(claim)), workerId);
        throw new SkiplockError('DRAIN_LIMIT', `drain ran ${maxJobs} attempts and due jobs remain`);
      }
      const { leaseSeq: _lease, ...job } = claim;
      const handler = byKind.get(job.kind);
      const onSuccess = options.onSuccess ?? 'delete';
      const outcome = handler?.transactional
        ? await drainTransactional(
            pool,
            queries,
            claim,
            job,
            handler.handle,
            handler.timeoutMs,
            workerId,
            onSuccess,
          )
        : await runJob(handler?.handle, job, new AttemptControl(), handler?.timeoutMs);
      if (outcome.ok) {
        // A transactional handler's job was completed in its transaction.
        if (!handler?.transactional) await queries.results.complete(pool, [claim], workerId, onSuccess);
        result.succeeded++;
        result.jobs.push({ job, status: 'succeeded' });
      } else {
        const [written] = await failOrSnooze(
          queries,
          pool,
          [
            {
              ...claim,
              error: outcome.error,
              permanent: outcome.permanent,
              snoozeDelayMs: outcome.snoozeDelayMs,
              retryDelayMs: kindRetryDelayMs(handler, claim, outcome),
            },
          ],
          workerId,
        );
        if (outcome.snoozeDelayMs !== undefined) {
          result.snoozed++;
          result.jobs.push({ job, status: 'snoozed' });
        } else {
          result.failed++;
          result.jobs.push({ job, status: written?.status ?? 'queued', error: outcome.error });
        }
      }
    }
  }
}

/** Claims a batch as a worker would: queues with limits through the limited claim, within their limits. */
async function claimFor(
  queries: JobQueries,
  pool: pg.Pool,
  queues: string[],
  kinds: string[],
  workerId: string,
  kindMaxAttempts: KindMaxAttempts | undefined,
): Promise<ClaimedJob[]> {
  const request = {
    kinds,
    limit: DRAIN_BATCH,
    workerId,
    visibilityTimeoutMs: DEFAULT_VISIBILITY_TIMEOUT_MS,
    prepared: false,
    kindMaxAttempts,
  };
  const limited = await queries.queueLimits.limited(pool, queues);
  const open = queues.filter((q) => !limited.includes(q));
  const claimed = open.length === 0 ? [] : await queries.claim.claim(pool, { ...request, queues: open });
  for (const queue of limited) {
    const { jobs } = await queries.limitedClaim.claim(pool, { ...request, queues: [queue] });
    for (const job of jobs) claimed.push(job);
  }
  return claimed;
}

/** The queues to claim from: the given ones, or those holding queued jobs of `kinds`. */
async function queuesOf<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  kinds: string[],
  queue: string | string[] | undefined,
): Promise<string[]> {
  if (queue !== undefined) return Array.isArray(queue) ? queue : [queue];
  const queued = await skiplock.listJobs({ status: 'queued', kind: kinds, limit: 100_000 });
  return [...new Set(queued.map((j) => j.queue))];
}

/** Which jobs {@link enqueued} lists. */
export interface EnqueuedFilter<Jobs extends JobMap = JobMap> {
  /** Only jobs of this kind (or these kinds). */
  kind?: (keyof Jobs & string) | (keyof Jobs & string)[];
  /** Only jobs of this queue (or these queues). */
  queue?: string | string[];
}

/**
 * The queued jobs (due or scheduled), oldest first: what a test enqueued and
 * no worker has taken yet.
 *
 * @throws {ValidationError} on a bad filter.
 */
export async function enqueued<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  filter: EnqueuedFilter<Jobs> = {},
): Promise<JobRecord[]> {
  return skiplock.listJobs({
    status: 'queued',
    order: 'oldest',
    limit: 100_000,
    ...(filter.kind !== undefined ? { kind: filter.kind } : {}),
    ...(filter.queue !== undefined ? { queue: filter.queue } : {}),
  });
}
