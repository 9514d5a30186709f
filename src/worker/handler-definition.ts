/**
 * Handlers as users declare them: a bare function, or an object that also
 * gives its kind defaults (`maxAttempts`, `timeoutMs`, `backoff`), or a
 * transactional handler (`transactional: true`) that runs in a transaction
 * the job's completion commits with, or a batch handler (`handleBatch`) that
 * takes many jobs of its kind at once. Resolved once, when the worker is made,
 * into one shape the worker runs.
 */

import type pg from 'pg';
import { z } from 'zod';
import type { KindMaxAttempts } from '../db/queries/claim.js';
import type { ParentJob } from '../db/queries/dependencies.js';
import { ValidationError } from '../errors.js';
import type { Job } from '../job/job.js';
import { assertName } from '../job/job.js';
import { integerInRange, parseOptions } from '../options.js';
import { MAX_TIMER_MS } from './option-specs.js';

/** What a handler gets besides the job. */
export interface HandlerContext {
  /**
   * Fires when the worker shuts down (reason: ShutdownError), when the job's
   * timeout passes (JobTimeoutError), when the lease was reclaimed
   * (LeaseLostError) or when the job was cancelled (CancelledError; the attempt
   * ends at once and the job ends `cancelled`). Cooperative handlers stop their
   * work when it fires.
   */
  signal: AbortSignal;
  /**
   * The job's parents (`dependsOn`), by id: each one's id, kind, what it
   * ended as, and its result (null when it stored none). Empty for a job
   * enqueued without parents. One read of the database per call.
   * @throws {DatabaseError} from the database.
   * @throws {SkiplockError} (code `USAGE`) in a middleware around a batch
   *   handler: that context is the whole batch's, not one job's.
   */
  parents(): Promise<ParentJob[]>;
  /**
   * Reports the job's progress: any JSON value of at most 4 KiB (a percentage,
   * `{ done, total }`…), stored with the job while its lease is held, shown by
   * `getJob`, the CLI and the dashboard, and emitted as `job:progress`. Writes
   * are coalesced to a few a second (the last value wins); await the promise
   * to know it was written. Resolves false when nothing was written: the lease
   * is gone (the job was reclaimed, cancelled or finished) or the write failed.
   *
   * @throws {ValidationError} (rejects) naming `progress` when the value is not JSON or too large;
   *   not awaited, the refused report is dropped (the process does not see an unhandled rejection).
   */
  progress(value: unknown): Promise<boolean>;
  /**
   * Appends a line to the job's log (the newest 50 lines are kept, each cut
   * after 1,000 characters), written like {@link HandlerContext.progress}.
   *
   * @throws {ValidationError} (rejects) naming `line` when it is not a string; not awaited,
   *   the refused line is dropped.
   */
  log(line: string): Promise<boolean>;
}

/** The function that performs jobs of one kind. Delivery is at-least-once: make it idempotent. */
export type Handler<Kind extends string, Payload> = (
  job: Job<Kind, Payload>,
  context: HandlerContext,
) => unknown;

/**
 * Delay before the retry of a failed attempt, in milliseconds: a fixed number,
 * or a function of the attempts made so far (including the failed one, ≥ 1)
 * that returns a finite number ≥ 0. A function that throws or returns anything
 * else falls back to the default rule, `2^attempts` s capped at one hour, with
 * jitter (see `backoffDelayMs`).
 */
export type Backoff = number | ((attempts: number) => number);

/**
 * Defaults a handler gives the jobs of its kind. Each applies only to what the
 * job itself does not say: a job enqueued with `maxAttempts` keeps it.
 */
export interface HandlerPolicy {
  /**
   * Attempts before the dead letter for jobs of this kind enqueued without
   * `maxAttempts` (integer 1…2147483647). @default the job's own, 20
   */
  maxAttempts?: number | undefined;
  /**
   * Run time after which an attempt of this kind fails (retryable), in
   * milliseconds (1…2147483647). @default the worker's `jobTimeoutMs`
   */
  timeoutMs?: number | undefined;
  /** Retry delay of this kind (see {@link Backoff}). @default exponential with jitter */
  backoff?: Backoff | undefined;
}

/**
 * A handler declared with its kind's defaults, transactional or not.
 *
 * With `transactional: true`, `handle`'s context is a
 * {@link TransactionalHandlerContext}: write its type on the parameter
 * (`handle: async (job, { client }: TransactionalHandlerContext) => …`), or
 * declare the definition as a {@link TransactionalHandlerDefinition}, which
 * types it for you. (One definition type for both keeps `job` typed by its
 * kind in the common form, which a union of the two would lose.)
 */
export interface HandlerDefinition<Kind extends string, Payload> extends HandlerPolicy {
  /**
   * Run `handle` in the transaction the job's completion commits with (see
   * {@link TransactionalHandlerDefinition}). @default false
   */
  transactional?: boolean | undefined;
  /** Performs one job. */
  handle(job: Job<Kind, Payload>, context: HandlerContext): unknown;
}

/** What a transactional handler gets besides the job. */
export interface TransactionalHandlerContext extends HandlerContext {
  /**
   * A connection of the worker's, inside the transaction that the job's
   * completion commits with. Run the handler's writes on it. Do not release
   * it, and do not send BEGIN, COMMIT or ROLLBACK (SAVEPOINTs are fine; a
   * `SET TRANSACTION ISOLATION LEVEL …` as its first statement is too): the
   * worker ends the transaction. It is closed once `signal` fires.
   */
  client: pg.PoolClient;
}

/** The function that performs jobs of one kind inside the job's transaction. */
export type TransactionalHandler<Kind extends string, Payload> = (
  job: Job<Kind, Payload>,
  context: TransactionalHandlerContext,
) => unknown;

/**
 * A handler whose database writes commit together with its job's completion.
 * The worker opens a transaction on a connection of its own, runs `handle`
 * with it, and completes the job (fenced by its lease, by the `onSuccess`
 * policy) in the same transaction before COMMIT. When the handler throws,
 * times out, is cancelled or stopped, or the lease was lost, the transaction
 * rolls back: its writes vanish with the attempt. Writes elsewhere (HTTP
 * calls, other connections) are still at-least-once.
 *
 * @example
 * const chargeOrder: TransactionalHandlerDefinition<'charge_order', { orderId: number }> = {
 *   transactional: true,
 *   handle: async (job, { client }) => {
 *     await client.query('UPDATE orders SET charged = true WHERE id = $1', [job.payload.orderId]);
 *   },
 * };
 * // or inline, the context's type written out:
 * handlers: {
 *   charge_order: {
 *     transactional: true,
 *     handle: async (job, { client }: TransactionalHandlerContext) => {
 *       await client.query('UPDATE orders SET charged = true WHERE id = $1', [job.payload.orderId]);
 *     },
 *   },
 * }
 */
export interface TransactionalHandlerDefinition<Kind extends string, Payload> extends HandlerPolicy {
  /** Run `handle` in the transaction the job's completion commits with. */
  transactional: true;
  /** Performs one job on the transaction's `client`. */
  handle(job: Job<Kind, Payload>, context: TransactionalHandlerContext): unknown;
}

// --- batch handlers ---

/** What a batch handler gets besides its jobs. */
export interface BatchContext {
  /**
   * Fires for the whole batch: when its timeout (the kind's `timeoutMs`, else
   * the worker's `jobTimeoutMs`) passes (JobTimeoutError) or when the worker
   * stops and gives the batch's jobs back (ShutdownError). A job of the batch
   * that is cancelled or whose lease is lost meanwhile ends on its own (its
   * outcome is then not heard); the others carry on.
   */
  signal: AbortSignal;
}

/**
 * How one job of a batch ended, at its place in the array `handleBatch`
 * returns: `undefined` or any value that is not an Error — success; an Error —
 * a failed attempt, as if a single handler had thrown it (a `PermanentError`
 * fails without retry, a `SnoozeError` snoozes without charging the attempt).
 */
export type BatchOutcome = unknown;

/** The largest `maxBatchSize`. */
export const MAX_BATCH_SIZE = 1_000;

/** The longest `maxWaitMs`, in milliseconds. */
export const MAX_BATCH_WAIT_MS = 60_000;

/**
 * A handler that performs up to `maxBatchSize` jobs of its kind in one call —
 * one insert of many rows, one request to a bulk API. It returns one
 * {@link BatchOutcome} per job, in the order of `jobs`; each job is then
 * finished by its own outcome, fenced by its own lease, exactly as a single
 * handler's job would be (attempts, retry and backoff, dead letter, snooze).
 * A batch that throws, or times out, fails every job of it (each attempt
 * charged, each retried by its own count); so does a returned array whose
 * length is not `jobs.length`.
 *
 * A batch takes one of the worker's `concurrency` slots, whatever its size:
 * the point of a batch is one call for many jobs. Jobs held (running in
 * batches and buffered) stay bounded by what the worker claims: to fill
 * batches, give the worker `batchSize` and `prefetch` near `maxBatchSize`.
 * Middleware runs once around each batch, given its first job. Batch handlers
 * cannot be transactional; broker-side workers refuse them. `drain()` in
 * `skiplock/testing` runs them with batches of one job.
 *
 * @example
 * handlers: {
 *   send_email: {
 *     maxBatchSize: 500,
 *     maxWaitMs: 200,
 *     handleBatch: async (jobs) => {
 *       const sent = await mailer.sendMany(jobs.map((job) => job.payload));
 *       return sent.map((r) => (r.ok ? undefined : new Error(r.reason)));
 *     },
 *   },
 * }
 */
export interface BatchHandlerDefinition<Kind extends string, Payload> extends HandlerPolicy {
  /** Performs `jobs` (1…maxBatchSize of them, oldest claim first); returns one outcome per job, in their order. */
  handleBatch(
    jobs: Job<Kind, Payload>[],
    context: BatchContext,
  ): readonly BatchOutcome[] | PromiseLike<readonly BatchOutcome[]>;
  /** Most jobs in one call (integer 1…1000). @default 100 */
  maxBatchSize?: number | undefined;
  /**
   * How long a batch that is not full waits for more jobs of its kind to
   * arrive before it runs, in milliseconds (integer 0…60000); 0 runs it with
   * the jobs the worker holds now. The batch holds its slot while it waits.
   * @default 0
   */
  maxWaitMs?: number | undefined;
}

/** A batch handler after validation, defaults filled in. */
export interface ResolvedBatch {
  handleBatch: (jobs: Job[], context: BatchContext) => unknown;
  maxBatchSize: number;
  maxWaitMs: number;
}

// --- end batch handlers ---

/**
 * A handler as given in `handlers`: a function, or a definition with defaults,
 * or a transactional one, or a batch handler.
 */
export type HandlerEntry<Kind extends string, Payload> =
  | Handler<Kind, Payload>
  // A TransactionalHandlerDefinition is one of these (its handle's context is wider).
  | HandlerDefinition<Kind, Payload>
  | BatchHandlerDefinition<Kind, Payload>;

/**
 * A handler after validation: its function and its kind's defaults. A batch
 * handler has `batch`, and a `handle` that runs it on one job (for the paths
 * that run jobs one at a time).
 */
export type ResolvedHandler =
  | (HandlerPolicy & { transactional: false; handle: Handler<string, unknown>; batch?: ResolvedBatch })
  | (HandlerPolicy & { transactional: true; handle: TransactionalHandler<string, unknown> });

const definitionSchema = z.strictObject({
  handle: z.custom<Handler<string, unknown>>((v) => typeof v === 'function', {
    error: 'must be a function',
  }),
  transactional: z.boolean({ error: 'must be a boolean' }).optional(),
  maxAttempts: integerInRange(1, 2_147_483_647).optional(),
  timeoutMs: z
    .number({ error: 'must be a number of milliseconds' })
    .refine(Number.isFinite, { error: 'must be finite' })
    .refine((v) => v >= 1, { error: 'must be ≥ 1' })
    .refine((v) => v <= MAX_TIMER_MS, { error: `must be ≤ ${MAX_TIMER_MS}` })
    .optional(),
  backoff: z
    .union(
      [
        z.number().refine((v) => Number.isFinite(v) && v >= 0 && v <= 2_147_483_647, {
          error: 'must be a number of milliseconds (0…2147483647) or a function of attempts',
        }),
        z.custom<(attempts: number) => number>((v) => typeof v === 'function'),
      ],
      { error: 'must be a number of milliseconds (0…2147483647) or a function of attempts' },
    )
    .optional(),
});

const policyShape = {
  maxAttempts: definitionSchema.shape.maxAttempts,
  timeoutMs: definitionSchema.shape.timeoutMs,
  backoff: definitionSchema.shape.backoff,
};

const batchDefinitionSchema = z.strictObject({
  handleBatch: z.custom<ResolvedBatch['handleBatch']>((v) => typeof v === 'function', {
    error: 'must be a function',
  }),
  transactional: z.literal(false, { error: 'batch handlers cannot be transactional' }).optional(),
  maxBatchSize: integerInRange(1, MAX_BATCH_SIZE).optional(),
  maxWaitMs: integerInRange(0, MAX_BATCH_WAIT_MS).optional(),
  ...policyShape,
});

/** Resolves a batch definition; its `handle` runs a batch of one job. */
function resolveBatch(entry: object, field: string): ResolvedHandler {
  if ('handle' in entry)
    throw new ValidationError(`${field}.handle`, 'give either handle or handleBatch, not both');
  const {
    handleBatch,
    maxBatchSize,
    maxWaitMs,
    transactional: _,
    ...policy
  } = parseOptions(batchDefinitionSchema, entry, field);
  const batch: ResolvedBatch = {
    handleBatch,
    maxBatchSize: maxBatchSize ?? 100,
    maxWaitMs: maxWaitMs ?? 0,
  };
  // One job at a time (drain): its outcome thrown, or its value returned as its result.
  const handle = async (job: Job, context: HandlerContext): Promise<unknown> => {
    const outcomes = await handleBatch([job], context);
    const outcome = batchOutcomes(outcomes, 1)[0];
    if (outcome instanceof Error) throw outcome;
    return outcome;
  };
  return { ...policy, transactional: false, handle, batch };
}

/**
 * Checks what a batch handler returned: an array of `count` outcomes.
 *
 * @throws {Error} naming what was wrong, when it is not (the batch then fails every job).
 */
export function batchOutcomes(returned: unknown, count: number): readonly BatchOutcome[] {
  if (!Array.isArray(returned))
    throw new Error(`handleBatch must return an array of ${count} outcomes; it returned ${typeof returned}`);
  if (returned.length !== count)
    throw new Error(
      `handleBatch must return one outcome per job: ${count} jobs, ${returned.length} outcomes`,
    );
  return returned;
}

/**
 * Validates `handlers` and resolves each entry to one shape.
 *
 * @param field - the option's name in errors, e.g. `worker.handlers`.
 * @returns handlers by kind, in a map (kinds like `__proto__` are safe).
 * @throws {ValidationError} naming the field (`worker.handlers.send_email.maxAttempts`…),
 *   or `field` itself when `handlers` is not an object.
 */
export function resolveHandlers(handlers: unknown, field: string): Map<string, ResolvedHandler> {
  if (typeof handlers !== 'object' || handlers === null || Array.isArray(handlers))
    throw new ValidationError(field, 'must be an object mapping kinds to handlers');
  const resolved = new Map<string, ResolvedHandler>();
  for (const [kind, entry] of Object.entries(handlers)) {
    assertName(kind, `${field} key`);
    if (typeof entry === 'function') {
      resolved.set(kind, { transactional: false, handle: entry as Handler<string, unknown> });
      continue;
    }
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      throw new ValidationError(
        `${field}.${kind}`,
        'must be a function or { handle, transactional, maxAttempts, timeoutMs, backoff } or { handleBatch, maxBatchSize, maxWaitMs, … }',
      );
    }
    if ('handleBatch' in entry) {
      resolved.set(kind, resolveBatch(entry, `${field}.${kind}`));
      continue;
    }
    const { transactional, ...parsed } = parseOptions(definitionSchema, entry, `${field}.${kind}`);
    resolved.set(
      kind,
      transactional === true
        ? { ...parsed, transactional: true, handle: parsed.handle as TransactionalHandler<string, unknown> }
        : { ...parsed, transactional: false },
    );
  }
  return resolved;
}

/**
 * The retry delay a kind's `backoff` gives after `attempts` attempts, in
 * milliseconds; undefined for the default rule (no backoff given, or a function
 * that threw or returned something other than a finite number ≥ 0).
 */
export function retryDelayMsOf(backoff: Backoff | undefined, attempts: number): number | undefined {
  if (backoff === undefined) return undefined;
  let delayMs: unknown;
  try {
    delayMs = typeof backoff === 'number' ? backoff : backoff(attempts);
  } catch {
    return undefined;
  }
  return typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0
    ? Math.min(delayMs, 2_147_483_647)
    : undefined;
}

/**
 * The retry delay of a failed attempt by its kind's `backoff`, in
 * milliseconds; undefined (the default rule) when the kind gives none, and when
 * no retry follows: a permanent error, a snooze, or the job's last attempt.
 */
export function kindRetryDelayMs(
  handler: ResolvedHandler | undefined,
  job: Pick<Job, 'attempts' | 'maxAttempts'>,
  outcome: { permanent: boolean; snoozeDelayMs?: number | undefined },
): number | undefined {
  if (handler?.backoff === undefined || outcome.permanent || outcome.snoozeDelayMs !== undefined)
    return undefined;
  if (job.attempts >= job.maxAttempts) return undefined;
  return retryDelayMsOf(handler.backoff, job.attempts);
}

/**
 * The kinds whose handler gives `maxAttempts`, and theirs, side by side (for
 * the claim); undefined when no handler gives one.
 */
export function kindMaxAttemptsOf(
  handlers: ReadonlyMap<string, ResolvedHandler>,
): KindMaxAttempts | undefined {
  const policy = { kinds: [] as string[], maxAttempts: [] as number[] };
  for (const [kind, handler] of handlers) {
    if (handler.maxAttempts === undefined) continue;
    policy.kinds.push(kind);
    policy.maxAttempts.push(handler.maxAttempts);
  }
  return policy.kinds.length > 0 ? policy : undefined;
}
