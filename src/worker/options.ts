/**
 * Worker options, their defaults, and their validation.
 */

import { z } from 'zod';
import { postgresUrl } from '../config.js';
import { ValidationError } from '../errors.js';
import { DEFAULT_QUEUE, DEFAULT_VISIBILITY_TIMEOUT_MS } from '../job/defaults.js';
import type { JobMap } from '../job/job.js';
import { assertName } from '../job/job.js';
import { type Retention, resolveRetention } from '../maintenance/pruner.js';
import { retentionSchema } from '../operations/prune.js';
import { durationMs, integerInRange, parseOptions } from '../options.js';
import { DEFAULT_MAX_RESULT_BYTES } from '../workflow/job-output.js';
import { type Middleware, withMiddleware } from './executor.js';
import { type HandlerEntry, type ResolvedHandler, resolveHandlers } from './handler-definition.js';
import {
  MAX_TIMER_MS,
  type NumberOptionSpec,
  WORKER_CHOICE_OPTIONS,
  WORKER_NUMBER_OPTIONS,
  WORKER_TEXT_OPTIONS,
} from './option-specs.js';

/** Handlers by kind, typed by the kind → payload map. */
export type Handlers<Jobs extends JobMap> = {
  [Kind in keyof Jobs & string]?: HandlerEntry<Kind, Jobs[Kind]>;
};

import type { SuccessPolicy } from '../db/queries/finish.js';

export type { SuccessPolicy };

/** Options of `skiplock.worker()`. Durations are milliseconds. */
export interface WorkerOptions<Jobs extends JobMap> {
  /**
   * Handlers by kind. The worker claims only jobs of these kinds; a job of
   * another kind waits for a worker that has its handler. At least one, unless
   * `maintenanceOnly` is true (then none).
   */
  handlers: Handlers<Jobs>;
  /**
   * A worker that runs no jobs: it only sweeps dead leases, prunes (with
   * `retentionMs`) and enqueues schedules' slots. Give `handlers: {}` with it.
   * Without it, a worker with no handlers is refused, as it is most likely a
   * mistake (an empty or wrongly exported handlers module).
   * @default false
   * @example
   * skiplock.worker({ handlers: {}, maintenanceOnly: true });
   */
  maintenanceOnly?: boolean;
  /** Queues to claim from. The worker claims only jobs of kinds in `handlers`. @default ['default'] */
  queues?: string[];
  /** Handlers running at once in this worker. @default 10 */
  concurrency?: number;
  /**
   * Most jobs one claim takes. A worker claims for its free slots, and while a
   * backlog waits also for its prefetch buffer. @default concurrency + prefetch
   */
  batchSize?: number;
  /**
   * Jobs a worker keeps claimed ahead of its free slots, in a local buffer,
   * so that one round trip serves many jobs; once the buffer is half empty it
   * is topped up by this many, so it holds at most one and a half times this
   * (handlers that wait on I/O run the half left while the claim is on its
   * way). Buffered jobs hold a lease like
   * running ones (heartbeats cover them; the sweeper reclaims them if the
   * process dies) and are given back at once on stop. A worker prefetches only
   * while its last claim came back full (a backlog waits), and no more jobs
   * than its handlers should start within about 100 ms by their recent run
   * times: an idle queue's few jobs, and slow jobs, go to free slots of any
   * worker. 0 turns prefetch off.
   * @default the larger of 4 × concurrency and 500
   */
  prefetch?: number;
  /**
   * A buffered job not started within this many milliseconds is given back to
   * `queued` (attempt not charged) for any worker to take. @default 10_000
   */
  prefetchTimeoutMs?: number;
  /**
   * Client-side deadline of every statement the worker sends: a claim stuck
   * behind a lock, or a connection that stopped answering, fails after this long
   * and is retried on a new connection. With `sessionSettings`, the worker's
   * sessions also get a `statement_timeout` a little under it (a tenth less, at
   * most a second; a lower one set for the role or database is kept), so that
   * the server rolls back a statement past it rather than committing it after
   * the worker gave up. A claim that times out is tried again at half the
   * size, as is a batch of results. @default 30_000
   */
  statementTimeoutMs?: number;
  /** Safety-net poll interval, for notifications that never came. @default 2000 */
  pollIntervalMs?: number;
  /** Age of `locked_at` after which the sweeper reclaims a running job. @default 300_000 (5 minutes) */
  visibilityTimeoutMs?: number;
  /** How often running jobs' `locked_at` is refreshed; must be below the visibility timeout. @default visibilityTimeoutMs / 5 */
  heartbeatIntervalMs?: number;
  /**
   * How often this worker tries to sweep dead leases, and to apply the success
   * policy of parents kept for their children (each one at a time across all
   * workers), in milliseconds. @default 60_000
   */
  sweepIntervalMs?: number;
  /**
   * Retention: succeeded, failed and cancelled jobs (and archived ones) whose
   * `finished_at` is older than this many milliseconds are deleted by a
   * periodic prune (one prune at a time across all workers, in batches of
   * 1000). Dead letters are kept for a person; prune them with
   * `skiplock.prune({ status: 'dead', … })` or `retention.dead`. An age in
   * `retention` wins over this one for its status. @default none (no pruning)
   */
  retentionMs?: number;
  /**
   * Retention per status, in milliseconds by `finished_at`: `{ succeeded,
   * failed, dead, cancelled }` for rows kept in the jobs table, `archive` for
   * the archive (dropped a whole UTC day at a time, so an archived row lives
   * up to one day longer than its age). A status left out takes `retentionMs`
   * (dead letters never do) or is kept forever. Pruned by the periodic prune
   * (every `pruneIntervalMs`, at most 10 batches of 1000 rows per status per
   * turn). @default none
   */
  retention?: Retention;
  /** How often this worker tries to prune when `retentionMs` is set. @default 60_000 */
  pruneIntervalMs?: number;
  /**
   * Handler run time after which the attempt fails (retryable), its signal is
   * aborted and its slot is freed. JavaScript cannot kill a handler that ignores
   * its signal: it keeps running beside the slot's next job, so honour the signal.
   * @default none
   */
  jobTimeoutMs?: number;
  /** How long `stop()` lets running handlers finish before aborting them and releasing their jobs. @default 30_000 */
  shutdownTimeoutMs?: number;
  /**
   * Largest handler return value stored as a job's `result`, in bytes of JSON
   * (results are stored only for jobs whose row outlives their success:
   * `onSuccess` `'keep'` or `'archive'`). A larger value, or one that is not
   * JSON, fails the attempt like a throw (retryable) with a ValidationError
   * naming `result`. @default 1_048_576 (1 MiB)
   */
  maxResultBytes?: number;
  /**
   * What happens to a succeeded job: deleted, kept as `succeeded`, or moved to
   * `jobs_archive`. A job with children is kept as `succeeded`, with its
   * result, until they have all started; then its policy applies. @default 'delete'
   */
  onSuccess?: SuccessPolicy;
  /** Stop gracefully on SIGTERM/SIGINT, then re-raise the signal if nobody else handles it. @default true */
  handleSignals?: boolean;
  /** Id recorded in `locked_by`. @default `<hostname>:<pid>:<random>` */
  workerId?: string;
  /**
   * Hold a LISTEN connection for wake-ups. With `false` the worker opens none
   * and finds jobs by polling every `pollIntervalMs` (and at the `run_at` it
   * knows of): for poolers that cannot carry LISTEN and no direct connection.
   * @default true
   */
  listen?: boolean;
  /**
   * Where the LISTEN connection goes, when not where the worker's statements
   * go: behind PgBouncer in transaction mode, a direct URL of the server
   * (LISTEN needs a session of its own; through a transaction pooler it
   * silently hears nothing). @default the Skiplock's connection
   */
  listenConnectionString?: string;
  /**
   * How often the LISTEN connection checks that it still hears: the worker
   * sends a probe wake-up and expects it back within 2 seconds; a listener that
   * hears nothing (half-open socket, LISTEN through a transaction pooler) is
   * reported once as `worker:warning` and replaced, and the worker polls
   * meanwhile. A probe also runs right after each LISTEN. @default 30_000
   */
  listenProbeIntervalMs?: number;
  /**
   * Send the claim as a named prepared statement (parsed and planned once per
   * connection). Behind a pooler that does not carry prepared statements
   * across its server connections (PgBouncer in transaction mode before 1.21,
   * or without `max_prepared_statements`), the first refusal (SQLSTATE 26000
   * or 42P05: the claim did not run) turns them off for this worker and the
   * claim goes again unnamed; false never sends one, and so leaves no such
   * refusal in the server's log. @default true
   */
  preparedStatements?: boolean;
  /**
   * Open the worker's connections with session settings in the startup
   * packet (`synchronous_commit = off`, `idle_in_transaction_session_timeout`).
   * Turn off behind PgBouncer, which refuses startup options; the worker's
   * transactions still set their idle timeout themselves, and commits then wait
   * for the WAL flush as the server is configured. @default true
   */
  sessionSettings?: boolean;
  /**
   * Enqueue the due slots of every schedule (cron), whatever the worker's
   * queues and handlers. Any number of workers may: each slot still gets one
   * job. Turn off for workers that should only run jobs. @default true
   */
  schedules?: boolean;
  /**
   * Hooks around every attempt of this worker's handlers, the first the
   * outermost (see {@link Middleware}): each gets the job, the handler's
   * context and `next`. Composed once when the worker is made; an empty list
   * costs nothing. @default []
   */
  middleware?: Middleware[];
}

/**
 * The least default prefetch: fast jobs are claimed up to this many per round
 * trip (the horizon of their run times still caps the buffer, so slow jobs are
 * not held back from other workers).
 */
const DEFAULT_MIN_PREFETCH = 500;

/** Worker options after defaults. */
export interface ResolvedWorkerOptions {
  /** Handlers by kind, validated, with their kinds' defaults. */
  handlers: Map<string, ResolvedHandler>;
  /** True for a worker that runs no jobs (no handlers). */
  maintenanceOnly: boolean;
  queues: string[];
  concurrency: number;
  batchSize: number;
  prefetch: number;
  prefetchTimeoutMs: number;
  statementTimeoutMs: number;
  pollIntervalMs: number;
  visibilityTimeoutMs: number;
  heartbeatIntervalMs: number;
  sweepIntervalMs: number;
  retentionMs: number | undefined;
  /** The ages in effect, per status and for the archive (`retention` over `retentionMs`). */
  retention: Retention;
  pruneIntervalMs: number;
  jobTimeoutMs: number | undefined;
  shutdownTimeoutMs: number;
  maxResultBytes: number;
  onSuccess: SuccessPolicy;
  handleSignals: boolean;
  workerId: string | undefined;
  listen: boolean;
  listenConnectionString: string | undefined;
  listenProbeIntervalMs: number;
  preparedStatements: boolean;
  sessionSettings: boolean;
  schedules: boolean;
  /** The middleware, already composed into `handlers`. */
  middleware: Middleware[];
}

/** The zod rule of a numeric option, from its spec. */
function numberOption(spec: NumberOptionSpec) {
  if (spec.unit === 'milliseconds' && spec.max <= MAX_TIMER_MS) return durationMs(spec.min);
  if (spec.unit === 'milliseconds') {
    return z
      .number({ error: 'must be a number of milliseconds' })
      .refine(Number.isFinite, { error: 'must be finite' })
      .refine((v) => v >= spec.min, { error: `must be ≥ ${spec.min}` })
      .refine((v) => v <= spec.max, { error: `must be ≤ ${spec.max}` });
  }
  return integerInRange(spec.min, spec.max);
}

const N = WORKER_NUMBER_OPTIONS;

const schema = z.strictObject({
  handlers: z.custom<Record<string, unknown>>(
    (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
    {
      error: 'must be an object mapping kinds to functions',
    },
  ),
  queues: z
    .array(z.unknown(), { error: 'must be an array of queue names' })
    .min(1, { error: 'must name at least one queue' })
    .optional(),
  concurrency: numberOption(N.concurrency).optional(),
  batchSize: numberOption(N.batchSize).optional(),
  prefetch: numberOption(N.prefetch).optional(),
  prefetchTimeoutMs: numberOption(N.prefetchTimeoutMs).optional(),
  statementTimeoutMs: numberOption(N.statementTimeoutMs).optional(),
  pollIntervalMs: numberOption(N.pollIntervalMs).optional(),
  visibilityTimeoutMs: numberOption(N.visibilityTimeoutMs).optional(),
  heartbeatIntervalMs: numberOption(N.heartbeatIntervalMs).optional(),
  sweepIntervalMs: numberOption(N.sweepIntervalMs).optional(),
  retentionMs: numberOption(N.retentionMs).optional(),
  retention: retentionSchema.optional(),
  pruneIntervalMs: numberOption(N.pruneIntervalMs).optional(),
  jobTimeoutMs: numberOption(N.jobTimeoutMs).optional(),
  shutdownTimeoutMs: numberOption(N.shutdownTimeoutMs).optional(),
  maxResultBytes: numberOption(N.maxResultBytes).optional(),
  onSuccess: z
    .enum(WORKER_CHOICE_OPTIONS.onSuccess.choices, { error: "must be 'delete', 'keep' or 'archive'" })
    .optional(),
  handleSignals: z.boolean({ error: 'must be a boolean' }).optional(),
  maintenanceOnly: z.boolean({ error: 'must be a boolean' }).optional(),
  schedules: z.boolean({ error: 'must be a boolean' }).optional(),
  workerId: z
    .string({ error: 'must be a string' })
    .min(1, { error: 'must not be empty' })
    .max(WORKER_TEXT_OPTIONS.workerId.maxLength, { error: 'must be at most 200 characters' })
    .optional(),
  listen: z.boolean({ error: 'must be a boolean' }).optional(),
  listenConnectionString: postgresUrl.optional(),
  listenProbeIntervalMs: numberOption(N.listenProbeIntervalMs).optional(),
  preparedStatements: z.boolean({ error: 'must be a boolean' }).optional(),
  sessionSettings: z.boolean({ error: 'must be a boolean' }).optional(),
  middleware: z
    .array(
      z.custom<Middleware>((v) => typeof v === 'function', { error: 'must be a function' }),
      { error: 'must be an array of functions' },
    )
    .optional(),
});

/**
 * Validates worker options and fills in defaults.
 *
 * @throws {ValidationError} naming the field (`worker.concurrency`, `worker.handlers.send_email`…);
 *   `worker.handlers` when there is none and `maintenanceOnly` is not true,
 *   `worker.maintenanceOnly` when it is true and handlers are given.
 */
export function resolveWorkerOptions(options: unknown): ResolvedWorkerOptions {
  if (typeof options !== 'object' || options === null)
    throw new ValidationError('worker', 'options must be an object');
  const parsed = parseOptions(schema, options, 'worker');
  const handlers = resolveHandlers(parsed.handlers, 'worker.handlers');
  const maintenanceOnly = parsed.maintenanceOnly ?? false;
  if (handlers.size === 0 && !maintenanceOnly) {
    throw new ValidationError(
      'worker.handlers',
      'has no handlers, so the worker would run no job (give maintenanceOnly: true for a worker that only sweeps, prunes and runs schedules)',
    );
  }
  if (handlers.size > 0 && maintenanceOnly) {
    throw new ValidationError(
      'worker.maintenanceOnly',
      'a maintenance-only worker runs no jobs: give handlers: {}',
    );
  }
  const queues = (parsed.queues ?? [DEFAULT_QUEUE]) as unknown[];
  queues.forEach((q, i) => {
    assertName(q, `worker.queues[${i}]`);
  });
  const concurrency = parsed.concurrency ?? 10;
  const prefetch = parsed.prefetch ?? Math.max(4 * concurrency, DEFAULT_MIN_PREFETCH);
  const visibilityTimeoutMs = parsed.visibilityTimeoutMs ?? DEFAULT_VISIBILITY_TIMEOUT_MS;
  const heartbeatIntervalMs = parsed.heartbeatIntervalMs ?? visibilityTimeoutMs / 5;
  if (parsed.listen === false && parsed.listenConnectionString !== undefined) {
    throw new ValidationError(
      'worker.listenConnectionString',
      'is for the LISTEN connection, which listen: false turns off',
    );
  }
  if (heartbeatIntervalMs >= visibilityTimeoutMs) {
    throw new ValidationError(
      'worker.heartbeatIntervalMs',
      'must be below visibilityTimeoutMs, or leases expire between heartbeats',
    );
  }
  return {
    handlers: withMiddleware(handlers, parsed.middleware ?? []),
    maintenanceOnly,
    queues: [...new Set(queues as string[])],
    concurrency,
    batchSize: Math.min(parsed.batchSize ?? concurrency + prefetch, concurrency + prefetch),
    prefetch,
    prefetchTimeoutMs: parsed.prefetchTimeoutMs ?? 10_000,
    statementTimeoutMs: parsed.statementTimeoutMs ?? 30_000,
    pollIntervalMs: parsed.pollIntervalMs ?? 2000,
    visibilityTimeoutMs,
    heartbeatIntervalMs,
    sweepIntervalMs: parsed.sweepIntervalMs ?? 60_000,
    retentionMs: parsed.retentionMs,
    retention: resolveRetention(parsed.retention, parsed.retentionMs),
    pruneIntervalMs: parsed.pruneIntervalMs ?? 60_000,
    jobTimeoutMs: parsed.jobTimeoutMs,
    shutdownTimeoutMs: parsed.shutdownTimeoutMs ?? 30_000,
    maxResultBytes: parsed.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
    onSuccess: parsed.onSuccess ?? 'delete',
    handleSignals: parsed.handleSignals ?? true,
    workerId: parsed.workerId,
    listen: parsed.listen ?? true,
    listenConnectionString: parsed.listenConnectionString,
    listenProbeIntervalMs: parsed.listenProbeIntervalMs ?? 30_000,
    preparedStatements: parsed.preparedStatements ?? true,
    sessionSettings: parsed.sessionSettings ?? true,
    schedules: parsed.schedules ?? true,
    middleware: parsed.middleware ?? [],
  };
}
