/**
 * Helpers for users' tests: run the jobs a test enqueued, in-process and to
 * completion, without starting a worker (`drain`), and look at what is queued
 * (`enqueued`). Both run on the Skiplock's own database, so what they see is
 * what a worker would. `drain` runs the worker's executor and writes results
 * with the worker's finish statement; with `client` it runs inside the
 * caller's transaction.
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
import { z } from 'zod';
import { type Queryable, withTransaction } from '../db/executor.js';
import type { ClaimedJob, KindMaxAttempts } from '../db/queries/claim.js';
import type { FinishOutcome, SuccessPolicy } from '../db/queries/finish.js';
import { leaseKey } from '../db/queries/job-row.js';
import { JobQueries } from '../db/queries/jobs.js';
import { SkiplockError, ValidationError } from '../errors.js';
import { DEFAULT_VISIBILITY_TIMEOUT_MS } from '../job/defaults.js';
import { assertName, type Job, type JobMap, type JobRecord } from '../job/job.js';
import { KEPT_PARENTS_BATCH_LIMIT } from '../maintenance/kept-parents.js';
import { integerInRange, parseOptions } from '../options.js';
import type { Skiplock } from '../skiplock.js';
import { attemptResult } from '../worker/completer.js';
import {
  AttemptControl,
  batchParents,
  failure,
  type Middleware,
  type RunOutcome,
  runJob,
  withMiddleware,
} from '../worker/executor.js';
import { kindMaxAttemptsOf, kindRetryDelayMs, resolveHandlers } from '../worker/handler-definition.js';
import type { Handlers } from '../worker/options.js';
import { DEFAULT_MAX_RESULT_BYTES, successToWrite } from '../workflow/job-output.js';
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
  /**
   * The caller's connection, inside its BEGIN … COMMIT: every statement of the
   * drain (claims, results, the reads of queued jobs) runs on it, and nothing
   * commits on its own — the jobs' claims and results commit or roll back with
   * the caller's transaction. A transactional handler then runs in a savepoint
   * of it, with this connection as its `client`. Jobs enqueued earlier in the
   * transaction are drained too. Handlers that write through other
   * connections commit those writes on their own. Any object with
   * `query(text, values)`. @default skiplock's pool (each result commits)
   */
  client?: Queryable | undefined;
}

/** One attempt {@link drain} ran, and what the job became. */
export interface DrainedJob {
  job: Job;
  /**
   * `succeeded`; `snoozed` (the handler threw a SnoozeError: queued again after
   * its delay, the attempt not charged); after a failure: `queued` (a retry,
   * due after its backoff), `failed` or `dead`; or `cancelled` (its cancel was
   * requested while it ran, whatever the handler returned).
   */
  status: 'succeeded' | 'snoozed' | 'queued' | 'failed' | 'dead' | 'cancelled';
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
  /** Attempts whose job ended `cancelled` (its cancel was requested). */
  cancelled: number;
  /** Every attempt, in the order run. */
  jobs: DrainedJob[];
}

/** Jobs claimed per round trip. */
const DRAIN_BATCH = 100;

const drainOptionsSchema = z.strictObject({
  kinds: z.array(z.unknown(), { error: 'must be an array of kinds' }).optional(),
  queue: z
    .union([z.string(), z.array(z.unknown()).min(1, { error: 'must be a non-empty array of queue names' })], {
      error: 'must be a queue name or a non-empty array of queue names',
    })
    .optional(),
  onSuccess: z
    .enum(['delete', 'keep', 'archive'], { error: "must be 'delete', 'keep' or 'archive'" })
    .optional(),
  maxJobs: integerInRange(1, Number.MAX_SAFE_INTEGER).optional(),
  client: z
    .custom((v) => typeof (v as Partial<Queryable> | null)?.query === 'function', {
      error: 'must be a connection with a query(text, values) method',
    })
    .optional(),
  middleware: z
    .custom((v) => Array.isArray(v) && v.every((m) => typeof m === 'function'), {
      error: 'must be an array of functions',
    })
    .optional(),
});

/** @throws {ValidationError} naming the option (`options.maxJobs`, `options.kinds[1]`…). */
function assertDrainOptions(options: unknown): void {
  const parsed = parseOptions(drainOptionsSchema, options, 'options');
  for (const [i, kind] of (parsed.kinds ?? []).entries()) assertName(kind, `options.kinds[${i}]`);
  if (typeof parsed.queue === 'string') assertName(parsed.queue, 'options.queue');
  for (const [i, queue] of (Array.isArray(parsed.queue) ? parsed.queue : []).entries())
    assertName(queue, `options.queue[${i}]`);
}

/**
 * Runs every due job of the given kinds to completion, one at a time, in this
 * process: claims them as a worker does (attempts count, leases, results and
 * retries are the worker's), so it also runs due jobs the handlers enqueue.
 * A failed attempt is retried with backoff as usual, and a snoozed job is due
 * after its delay, so neither runs again in this call unless it is already due
 * (a snooze of 0 ms runs again at once). Queues with limits are claimed
 * within them, as a worker would: once a rate allows no more starts, their
 * jobs are left for a later call. Resolves when no due job of those kinds is
 * left (or none may start), after applying the success policy of parents
 * kept for their children that have all started, as a worker's maintenance
 * loop does.
 * A batch handler (`handleBatch`) is called with one job at a time; its
 * context's `parents()` rejects as under a worker (code `USAGE`).
 *
 * @example
 * // Inside the test's transaction: roll back, and the jobs are as they were.
 * await client.query('BEGIN');
 * await skiplock.enqueue('send_invoice_email', { orderId: 42 }, { client });
 * await drain(skiplock, handlers, { client });
 * await client.query('ROLLBACK');
 *
 * @throws {SkiplockError} (code `DRAIN_LIMIT`) after `maxJobs` attempts.
 * @throws {ValidationError} naming the option, before anything is claimed: an unknown one,
 *   `options.kinds` or `options.queue` not names (or a kind without a handler), `options.onSuccess` not a policy,
 *   `options.maxJobs` not an integer ≥ 1, `options.middleware` not an array of functions,
 *   `options.client` without a `query` method; `handlers` (naming the kind) as `worker()` does.
 * @throws {DatabaseError} from the database.
 */
export async function drain<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  handlers: Handlers<Jobs>,
  options: DrainOptions<Jobs> = {},
): Promise<DrainResult> {
  assertDrainOptions(options);
  const queries = new JobQueries(skiplock.schema);
  const client = options.client;
  const db: Queryable = client ?? skiplock.pool;
  const middleware = options.middleware ?? [];
  const byKind = withMiddleware(resolveHandlers(handlers, 'handlers'), middleware);
  const kindMaxAttempts = kindMaxAttemptsOf(byKind);
  const kinds: string[] = options.kinds ?? [...byKind.keys()];
  for (const [i, kind] of kinds.entries())
    if (!byKind.has(kind)) throw new ValidationError(`options.kinds[${i}]`, `has no handler among handlers`);
  const maxJobs = options.maxJobs ?? 10_000;
  const workerId = `skiplock-testing:${process.pid}:${randomBytes(4).toString('hex')}`;
  const onSuccess = options.onSuccess ?? 'delete';
  const result: DrainResult = { succeeded: 0, failed: 0, snoozed: 0, cancelled: 0, jobs: [] };
  if (kinds.length === 0) return result;
  for (;;) {
    const queues = await queuesOf(skiplock, db, kinds, options.queue);
    const claimed =
      queues.length === 0
        ? []
        : await claimFor(queries, skiplock.pool, client, queues, kinds, workerId, kindMaxAttempts);
    if (claimed.length === 0) {
      await settleKeptParents(queries, skiplock.pool, client);
      return result;
    }
    for (const claim of claimed) {
      if (result.jobs.length >= maxJobs) {
        await queries.results.release(db, claimed.slice(claimed.indexOf(claim)), workerId);
        throw new SkiplockError('DRAIN_LIMIT', `drain ran ${maxJobs} attempts and due jobs remain`);
      }
      const { leaseSeq: _lease, onSuccess: ownPolicy, ...job } = claim;
      const handler = byKind.get(job.kind);
      const lease = { id: claim.id, attempts: claim.attempts, leaseSeq: claim.leaseSeq };
      let outcome: RunOutcome;
      let written: FinishOutcome | undefined;
      if (handler?.transactional) {
        // Its job was finished in its transaction (or ended cancelled); only a failure is left to write.
        const ran = await drainTransactional(
          { pool: skiplock.pool, client, queries, workerId, onSuccess },
          claim,
          job,
          handler.handle,
          handler.timeoutMs,
        );
        outcome = ran === 'cancelled' ? { ok: true } : ran;
        written = ran === 'cancelled' ? 'cancelled' : ran.ok ? 'succeeded' : undefined;
      } else {
        const control = new AttemptControl();
        // A batch handler's parents() rejects as under a worker, where its context is the batch's.
        control.parentsOf =
          handler?.batch !== undefined
            ? batchParents
            : (id) => queries.dependencies.parents(client ?? skiplock.pool, id);
        outcome = await runJob(handler?.handle, job, control, handler?.timeoutMs);
      }
      if (written === undefined) {
        let success: ReturnType<typeof successToWrite>;
        if (outcome.ok) {
          try {
            success = successToWrite(outcome.value, ownPolicy, onSuccess, DEFAULT_MAX_RESULT_BYTES);
          } catch (error) {
            outcome = failure(error);
          }
        }
        const failed = outcome.ok
          ? undefined
          : { ...outcome, retryDelayMs: kindRetryDelayMs(handler, claim, outcome) };
        const rows = await queries.finish.finish(
          db,
          [{ ...lease, ...attemptResult(failed), ...(failed ? undefined : success) }],
          workerId,
          onSuccess,
        );
        written = rows.get(leaseKey(claim))?.outcome;
      }
      record(result, job, outcome, written);
    }
  }
}

/**
 * Applies the success policy of the parents kept for their children, as the
 * maintenance loop does: in `client`'s transaction when given, else in one
 * of its own.
 */
async function settleKeptParents(queries: JobQueries, pool: pg.Pool, client: Queryable | undefined) {
  const settle = (db: Queryable) => queries.dependencies.settleKeptParents(db, KEPT_PARENTS_BATCH_LIMIT);
  for (;;) {
    const { locked } = client ? await settle(client) : await withTransaction(pool, settle, 60_000, true);
    if (locked < KEPT_PARENTS_BATCH_LIMIT) return;
  }
}

/** Adds one attempt to `result`; `written` is what the finish statement wrote (undefined: nothing). */
function record(
  result: DrainResult,
  job: Job,
  outcome: RunOutcome,
  written: FinishOutcome | undefined,
): void {
  if (written === 'cancelled') {
    result.cancelled++;
    result.jobs.push({ job, status: 'cancelled' });
  } else if (outcome.ok) {
    result.succeeded++;
    result.jobs.push({ job, status: 'succeeded' });
  } else if (outcome.snoozeDelayMs !== undefined) {
    result.snoozed++;
    result.jobs.push({ job, status: 'snoozed' });
  } else {
    result.failed++;
    const status = written === 'failed' || written === 'dead' ? written : 'queued';
    result.jobs.push({ job, status, error: outcome.error });
  }
}

/**
 * Claims a batch as a worker would: queues with limits through the limited
 * claim, within their limits; on `client` when given, else on `pool`.
 */
async function claimFor(
  queries: JobQueries,
  pool: pg.Pool,
  client: Queryable | undefined,
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
  const db = client ?? pool;
  const limited = await queries.queueLimits.limited(db, queues);
  const open = queues.filter((q) => !limited.includes(q));
  // Unnamed statements (prepared: false) take any connection.
  const claimed =
    open.length === 0 ? [] : await queries.claim.claim(db as pg.Pool, { ...request, queues: open });
  for (const queue of limited) {
    const only = { ...request, queues: [queue] };
    const { jobs } = client
      ? await queries.limitedClaim.claimIn(client, only)
      : await queries.limitedClaim.claim(pool, only);
    for (const job of jobs) claimed.push(job);
  }
  return claimed;
}

/** The queues to claim from: the given ones, or those holding queued jobs of `kinds` (read on `client`). */
async function queuesOf<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  client: Queryable,
  kinds: string[],
  queue: string | string[] | undefined,
): Promise<string[]> {
  if (queue !== undefined) return Array.isArray(queue) ? queue : [queue];
  const queued = await skiplock.listJobs({ status: 'queued', kind: kinds, limit: 100_000, client });
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
