/**
 * The Skiplock entry: configuration, migrate, and a thin front door to the
 * producer (enqueue, enqueueMany), the operations (requeue, stats, getJob,
 * listJobs, sweep), the queue controls (cancel, pauseQueue, resumeQueue,
 * setQueueLimits, queues, prune) and `worker()`.
 */
import pg from 'pg';
import {
  configSchema,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  type EnqueueManyItem,
  isPostgresUrl,
  NOT_A_POSTGRES_URL,
  type SkiplockConfig,
} from './config.js';
import { type NamedStatements, translateError } from './db/executor.js';
import { JobQueries } from './db/queries/jobs.js';
import { RelayQueries, type RelayQueueStatsRow } from './db/queries/relay.js';
import { assertSchemaName, DEFAULT_SCHEMA } from './db/sql.js';
import { poolWithStatementDeadline } from './db/statement-deadline.js';
import { SkiplockError, ValidationError } from './errors.js';
import { DEFAULT_VISIBILITY_TIMEOUT_MS } from './job/defaults.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, type JobMap, type JobRecord, type JobSummary } from './job/job.js';
import type { EnqueuedJob } from './job/unique.js';
import { type SweepResult, sweep as sweepOnce } from './maintenance/sweeper.js';
import { type MigrateResult, migrate } from './migrations/migrator.js';
import {
  type ArchivedJobSummary,
  type ListArchivedJobsFilter,
  listArchivedJobs,
} from './operations/archive.js';
import { type CancelCounts, type CancelFilter, cancel } from './operations/cancel.js';
import {
  getJob,
  type ListJobsFilter,
  listJobs,
  type QueueStats,
  type RequeueFilter,
  requeue,
  stats,
} from './operations/operations.js';
import { type PruneFilter, type PruneResult, prune } from './operations/prune.js';
import {
  type QueueLimits,
  type QueueLimitsOptions,
  type RateLimit,
  setQueueLimits,
} from './operations/queue-limits.js';
import { listQueues, pauseOrResumeQueue, type QueueInfo } from './operations/queues.js';
import { integerInRange, parseOptions } from './options.js';
import { enqueueMany, enqueueOne, type Producer } from './producer/enqueue.js';
import type { ClientOption, EnqueueOptions, JobOptions } from './producer/job-options.js';
import { clientOrPool } from './producer/job-options.js';
import type { ScheduleInfo, ScheduleOptions } from './schedule/schedule-options.js';
import { listSchedules, schedule, unschedule } from './schedule/schedules.js';
import { type JobTracing, loadTracing } from './telemetry/tracing.js';
import { listenClientConfig } from './worker/notifier.js';
import { WORKER_NUMBER_OPTIONS } from './worker/option-specs.js';
import { resolveWorkerOptions, type WorkerOptions } from './worker/options.js';
import { Worker } from './worker/worker.js';
import { type JobOutcome, JobWaiter, type WaitForOptions } from './workflow/job-waiter.js';

export type {
  ArchivedJobSummary,
  CancelCounts,
  CancelFilter,
  ClientOption,
  EnqueueManyItem,
  EnqueueOptions,
  JobOptions,
  ListArchivedJobsFilter,
  ListJobsFilter,
  PruneFilter,
  PruneResult,
  QueueInfo,
  QueueLimits,
  QueueLimitsOptions,
  QueueStats,
  RateLimit,
  RelayQueueStats,
  RequeueFilter,
  SkiplockConfig,
};

/** A relayed queue's backlog and the relay's lag, from {@link Skiplock.relayStats}. */
type RelayQueueStats = RelayQueueStatsRow;

/**
 * A job queue in one PostgreSQL schema.
 *
 * @typeParam Jobs - kind → payload map; it types `enqueue` and handlers.
 * @example
 * type Jobs = { send_invoice_email: { orderId: number } };
 * const skiplock = new Skiplock<Jobs>({ connectionString: process.env.DATABASE_URL });
 * await skiplock.migrate();
 * await skiplock.enqueue('send_invoice_email', { orderId: 42 });
 */
export class Skiplock<Jobs extends JobMap = JobMap> {
  /** The schema name (unquoted). */
  readonly schema: string;
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  /** Connect deadline of the pool skiplock made; undefined for a caller's pool. */
  readonly #connectTimeoutMs: number | undefined;
  readonly #clientConfig: pg.ClientConfig;
  /** The waits of `waitFor`, made on first use. */
  #waiter: JobWaiter | undefined;
  /** Where `waitFor` listens (`listenConnectionString`), when not on the Skiplock's connection. */
  readonly #listenConnectionString: string | undefined;
  readonly #queries: JobQueries;
  readonly #relayQueries: RelayQueries;
  readonly #workers = new Set<Worker>();
  readonly #tracingOn: boolean;
  readonly #maxPayloadBytes: number;
  readonly #named: NamedStatements;
  #tracing: Promise<JobTracing> | undefined;

  #closed = false;

  /**
   * @throws {ValidationError} on an unknown option, both or neither of `pool`
   *   and `connectionString` (without `DATABASE_URL`), a connection string (or
   *   `DATABASE_URL`) that is not a `postgres://` or `postgresql://` URL (such as
   *   `postgress://…`), a bad schema name (`public` and `information_schema` included, unless
   *   `allowSharedSchema`), a `tracing`, `allowSharedSchema` or `preparedStatements` that is not a boolean,
   *   `connectTimeoutMs` or `statementTimeoutMs` out of range or given with
   *   `pool` (your pool keeps its own settings), or `maxPayloadBytes` out of range.
   */
  constructor(config: SkiplockConfig = {}) {
    const parsed = parseOptions(configSchema, config, '');
    this.#listenConnectionString = parsed.listenConnectionString;
    const schema = parsed.schema === undefined ? DEFAULT_SCHEMA : parsed.schema;
    assertSchemaName(schema, parsed.allowSharedSchema === true);
    this.schema = schema;
    if (parsed.pool && parsed.connectionString) {
      throw new ValidationError('connectionString', 'give either pool or connectionString, not both');
    }
    this.#connectTimeoutMs = undefined;
    if (parsed.pool) {
      for (const field of ['connectTimeoutMs', 'statementTimeoutMs'] as const) {
        if (parsed[field] !== undefined)
          throw new ValidationError(field, 'applies to the pool skiplock makes: set it on your own pool');
      }
      this.#pool = parsed.pool;
      this.#ownsPool = false;
      this.#clientConfig = { ...(parsed.pool as unknown as { options: pg.ClientConfig }).options };
    } else {
      const connectionString = parsed.connectionString ?? process.env.DATABASE_URL;
      if (!connectionString) {
        throw new ValidationError('connectionString', 'give pool or connectionString (or set DATABASE_URL)');
      }
      if (!isPostgresUrl(connectionString)) {
        throw new ValidationError(
          parsed.connectionString === undefined ? 'DATABASE_URL' : 'connectionString',
          NOT_A_POSTGRES_URL,
        );
      }
      this.#clientConfig = { connectionString, application_name: 'skiplock' };
      this.#connectTimeoutMs = parsed.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
      // Client-side deadlines: a server that accepts TCP and never answers fails calls instead of hanging them.
      this.#pool = poolWithStatementDeadline(
        { ...this.#clientConfig, max: 10, connectionTimeoutMillis: this.#connectTimeoutMs, keepAlive: true },
        parsed.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
      );
      this.#ownsPool = true;
    }
    listenForPoolErrors(this.#pool);
    this.#queries = new JobQueries(schema);
    this.#relayQueries = new RelayQueries(this.#queries.names);
    this.#tracingOn = parsed.tracing === true;
    this.#maxPayloadBytes = parsed.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.#named = { on: parsed.preparedStatements ?? true };
  }

  /** The pool skiplock runs its statements on. */
  get pool(): pg.Pool {
    return this.#pool;
  }

  /**
   * Creates or upgrades the schema (forward-only, under an advisory lock; safe
   * from many processes at once).
   *
   * @throws {SchemaVersionError} when the database's schema is newer than this library.
   * @throws {DatabaseError} when the database cannot be reached (within
   *   `connectTimeoutMs` with skiplock's own pool; the migration's statements
   *   themselves have no client-side deadline).
   */
  async migrate(): Promise<MigrateResult> {
    this.#assertOpen();
    // A migration of a large table may outlast the statement deadline: it runs on a pool of its own.
    const pool =
      this.#connectTimeoutMs === undefined
        ? this.#pool
        : new pg.Pool({
            ...this.#clientConfig,
            max: 1,
            connectionTimeoutMillis: this.#connectTimeoutMs,
            keepAlive: true,
          });
    if (pool !== this.#pool) pool.on('error', ignorePoolError);
    try {
      return await migrate(pool, this.schema);
    } catch (error) {
      throw translateError(error);
    } finally {
      if (pool !== this.#pool) await pool.end();
    }
  }

  /**
   * Enqueues one job. With `options.client`, the insert runs on the caller's
   * connection and commits or rolls back with its transaction; workers are
   * woken on commit. With `options.uniqueKey`, a job already holding the key is
   * returned instead, with `duplicate: true`.
   *
   * @param kind - the job's kind (non-empty; any text).
   * @param payload - JSON arguments; `undefined` means `{}`.
   * @returns the job as inserted (id, runAt on the database clock, …), or the key's holder.
   * @throws {ValidationError} naming the field (`kind`, `payload.x`, `options.maxAttempts`…), or
   *   `payload` when its JSON is larger than `maxPayloadBytes` (1 MiB by default); nothing is inserted.
   * @throws {DatabaseError} from the database.
   * @throws {MissingDependencyError} with `tracing` on, when `@opentelemetry/api` is not installed.
   */
  async enqueue<Kind extends keyof Jobs & string>(
    kind: Kind,
    payload: Jobs[Kind],
    options: EnqueueOptions = {},
  ): Promise<EnqueuedJob<Kind, Jobs[Kind]>> {
    return (await enqueueOne(await this.#producer(), kind, payload, options)) as never;
  }

  /**
   * Enqueues many jobs in one statement (all or none), in input order. Each
   * returned job carries the payload as given and what the database decided
   * (id, runAt, createdAt). Items with unique keys behave as the same
   * `enqueue` calls made one after another, each returning what its call
   * would have: an item whose key is held comes back as the holding job with
   * `duplicate: true`; a key given twice is inserted once, a later `'skip'`
   * item being a duplicate of the first (as the job then stands), a later
   * `'replace'` item rewriting it. Overlapping batches never fail because of
   * each other.
   *
   * @throws {ValidationError} naming the item and field (`jobs[3].delayMs`; `jobs[3].payload` when
   *   larger than `maxPayloadBytes`); nothing is inserted.
   * @throws {DatabaseError} from the database.
   * @throws {MissingDependencyError} with `tracing` on, when `@opentelemetry/api` is not installed.
   */
  async enqueueMany(
    jobs: EnqueueManyItem<Jobs>[],
    options: ClientOption = {},
  ): Promise<EnqueuedJob<keyof Jobs & string, Jobs[keyof Jobs & string]>[]> {
    return (await enqueueMany(await this.#producer(), jobs, options)) as never;
  }

  /**
   * Creates or updates the schedule `name`: workers enqueue one job of `kind`
   * per slot of `cron` (5 or 6 fields, or `@hourly`…), read in
   * `options.timezone`, with run_at = the slot (database clock).
   *
   * @example
   * await skiplock.schedule('nightly-report', '30 2 * * *', 'send_report', {}, { timezone: 'Europe/Berlin' });
   * @throws {ValidationError} naming the field (`cron`, `options.timezone`, `kind`…); nothing is stored.
   */
  async schedule<Kind extends keyof Jobs & string>(
    name: string,
    cron: string,
    kind: Kind,
    payload: Jobs[Kind],
    options: ScheduleOptions = {},
  ): Promise<ScheduleInfo> {
    this.#assertOpen();
    return schedule(this.#queries, this.#pool, name, cron, kind, payload, options, this.#maxPayloadBytes);
  }

  /** Removes the schedule `name` (its jobs stay); true when it existed. @throws {ValidationError} for an empty name. */
  async unschedule(name: string, options: ClientOption = {}): Promise<boolean> {
    this.#assertOpen();
    return unschedule(this.#queries, this.#pool, name, options);
  }

  /** Every schedule, by name, with its next slot (`nextRunAt`). */
  async schedules(options: ClientOption = {}): Promise<ScheduleInfo[]> {
    this.#assertOpen();
    return listSchedules(this.#queries, this.#pool, options);
  }

  /**
   * Makes a worker for the given handlers. Call `start()` on it. With
   * `tracing` on, it runs each attempt in a `process` span.
   *
   * @throws {ValidationError} naming the option (`worker.concurrency`…).
   */
  worker(options: WorkerOptions<Jobs>): Worker {
    this.#assertOpen();
    const resolved = resolveWorkerOptions(options);
    const worker = new Worker(
      {
        clientConfig: this.#clientConfig,
        queries: this.#queries,
        schema: this.schema,
        ...(this.#tracingOn && { tracing: () => this.#loadTracing() }),
        onStop: (w) => this.#workers.delete(w),
      },
      resolved,
    );
    this.#workers.add(worker);
    return worker;
  }

  /**
   * Puts dead, failed or cancelled jobs back to `queued` with attempts 0,
   * run_at now and last_error cleared, and wakes workers. Give a filter
   * (`ids`, `status`, `kind`, `queue`), or `all: true` for every dead and
   * failed job. Cancelled jobs are requeued when named by id or by status. A
   * job with a unique key runs without it once requeued (a job never takes its
   * key back), beside any job that took the key meanwhile.
   *
   * @returns how many jobs were requeued.
   * @throws {ValidationError} on a bad filter, or none without `all: true`.
   */
  async requeue(filter: RequeueFilter<keyof Jobs & string>): Promise<number> {
    this.#assertOpen();
    return requeue(this.#queries, this.#pool, filter);
  }

  /**
   * Cancels queued and running jobs matching the filter (`ids`, `kind`,
   * `queue`, `status`; at least one). Queued jobs end `cancelled` at once. A
   * running job's handler gets its signal aborted (reason: CancelledError)
   * within about a second, and the job ends `cancelled`, never retried,
   * whatever the handler then returns. Finished jobs are left alone.
   *
   * @returns `{ cancelled, running }`: queued jobs cancelled, running jobs asked to stop.
   * @throws {ValidationError} on a bad or empty filter.
   * @example
   * await skiplock.cancel({ kind: 'send_invoice_email', queue: 'emails' });
   */
  async cancel(filter: CancelFilter<keyof Jobs & string>): Promise<CancelCounts> {
    this.#assertOpen();
    return cancel(this.#queries, this.#pool, filter);
  }

  /**
   * Pauses a queue (persisted): no worker claims from it once this resolves,
   * and within about a second none starts a job of it (jobs already in a
   * prefetch buffer are given back uncharged); running jobs finish. Other
   * queues run on.
   *
   * @returns false when the queue was paused already.
   * @throws {ValidationError} (field `name`) on an empty or unstorable name, or one longer
   *   than 1024 bytes of UTF-8 (as `enqueue` refuses it).
   */
  async pauseQueue(name: string, options: ClientOption = {}): Promise<boolean> {
    this.#assertOpen();
    return pauseOrResumeQueue(this.#queries, this.#pool, 'pause', name, options);
  }

  /**
   * Resumes a paused queue and wakes workers at once.
   *
   * @returns false when the queue was not paused.
   * @throws {ValidationError} (field `name`) on an empty or unstorable name, or one longer
   *   than 1024 bytes of UTF-8 (as `enqueue` refuses it).
   */
  async resumeQueue(name: string, options: ClientOption = {}): Promise<boolean> {
    this.#assertOpen();
    return pauseOrResumeQueue(this.#queries, this.#pool, 'resume', name, options);
  }

  /**
   * Sets or removes a queue's global limits, across all workers and hosts:
   * `concurrency` caps its running jobs, `rate: { count, periodMs }` caps how
   * many of its jobs start within any window of `periodMs`. A field left out
   * stays as it is; `null` removes that limit. Workers are told at once (and
   * re-read limits on every poll); jobs already running finish.
   *
   * @returns the queue's limits now in force.
   * @throws {ValidationError} naming the field (`concurrency`, `rate.count`,
   *   `rate.periodMs`, …) when a value is not an integer ≥ 1, `limits` when
   *   neither limit is given, or `name` as `pauseQueue` does; nothing is changed then.
   * @example
   * await skiplock.setQueueLimits('emails', { concurrency: 5, rate: { count: 100, periodMs: 60_000 } });
   * await skiplock.setQueueLimits('emails', { rate: null }); // keep the concurrency limit, drop the rate
   */
  async setQueueLimits(name: string, limits: QueueLimitsOptions): Promise<QueueLimits> {
    this.#assertOpen();
    return setQueueLimits(this.#queries, this.#pool, name, limits);
  }

  /** Every queue with jobs or settings, by name: paused or not, limits, queued and running counts. */
  async queues(options: ClientOption = {}): Promise<QueueInfo[]> {
    this.#assertOpen();
    return listQueues(this.#queries, this.#pool, options);
  }

  /**
   * Deletes finished jobs (succeeded, failed, dead, cancelled; or the given
   * `status`) and archived jobs whose `finished_at` is older than
   * `olderThanMs`, in batches of 1000 rows per statement; or, with
   * `retention`, each status after its own age. The archive's day partitions
   * whose whole UTC day is older are dropped, not deleted from.
   *
   * @returns rows deleted from the jobs table (`jobs`) and from the archive
   *   (`archive`), and archive partitions dropped (`archivePartitions`).
   * @throws {ValidationError} on a bad filter.
   * @example
   * await skiplock.prune({ olderThanMs: 7 * 24 * 3600_000, status: ['succeeded', 'cancelled'] });
   * await skiplock.prune({ retention: { succeeded: 86_400_000, dead: 30 * 86_400_000 } });
   */
  async prune(filter: PruneFilter): Promise<PruneResult> {
    this.#assertOpen();
    return prune(this.#queries, this.#pool, filter);
  }

  /** Per queue and status: counts, and for queued jobs the age of the oldest due one (ms). */
  async stats(options: ClientOption = {}): Promise<QueueStats[]> {
    this.#assertOpen();
    return stats(this.#queries, this.#pool, options);
  }

  /**
   * Per queue that a running relay relays (`createRelay`, `skiplock relay`):
   * how many jobs wait to be relayed (queued and due), the relay's lag (ms
   * since the oldest waiting job's `run_at`, by the database's clock; null when
   * none waits), how many a relay holds while it publishes them, and how many
   * the live relays published since they started. A queue counts as relayed
   * while a relay that names it has renewed its registration in the last 30
   * seconds; queues no relay relays are left out.
   */
  async relayStats(options: ClientOption = {}): Promise<RelayQueueStats[]> {
    this.#assertOpen();
    return this.#relayQueries.stats(clientOrPool(this.#pool, options));
  }

  /**
   * One job by id, with its status and bookkeeping, or undefined when no such
   * job is in the jobs table (deleted on success, or archived).
   *
   * @throws {ValidationError} (field `id`) when `id` is not a decimal job id.
   */
  async getJob(id: string, options: ClientOption = {}): Promise<JobRecord | undefined> {
    this.#assertOpen();
    return getJob(this.#queries, this.#pool, id, options);
  }

  /**
   * Waits until job `id` reaches a final status — `succeeded`, `failed`,
   * `dead` or `cancelled` — and resolves with its status, its `result` (the
   * handler's return value, kept when the job's row outlives its success:
   * `onSuccess` `'keep'` or `'archive'`; null otherwise) and its `lastError`.
   * Works from any process: the job's end sends a completion message, and a
   * poll every few seconds is the safety net. A job that is deleted on success
   * while waited for resolves as `succeeded` with a null result. All waits of
   * one Skiplock share one LISTEN connection, open while anyone waits.
   *
   * @throws {JobNotFoundError} when no job `id` exists (in the jobs table or the archive) when
   *   called, however short `timeoutMs` is: the first read of the job may finish up to a second
   *   past `timeoutMs`.
   * @throws {WaitTimeoutError} naming the job when `timeoutMs` passes first (a job already final
   *   when called resolves, however short `timeoutMs` is).
   * @throws the signal's reason when `signal` aborts.
   * @throws {ValidationError} naming `id` or the option.
   * @example
   * const { id } = await skiplock.enqueue('resize_image', { url }, { onSuccess: 'keep' });
   * const { status, result } = await skiplock.waitFor(id, { timeoutMs: 60_000 });
   */
  async waitFor(id: string, options?: WaitForOptions): Promise<JobOutcome> {
    this.#assertOpen();
    this.#waiter ??= new JobWaiter({
      pool: this.#pool,
      queries: this.#queries,
      clientConfig: listenClientConfig(this.#clientConfig, this.#listenConnectionString),
    });
    return this.#waiter.waitFor(id, options);
  }

  /**
   * A page of jobs matching the filter, newest first unless `order: 'oldest'`;
   * pass the last id as `after` for the next page. With `payloadPreviewChars`,
   * each job's payload is read only as its first characters (a
   * {@link JobSummary}): what list views should use, as a payload may be large.
   *
   * @throws {ValidationError} on a bad filter.
   * @example
   * const page = await skiplock.listJobs({ status: 'dead', limit: 50, payloadPreviewChars: 200 });
   * for (const job of page) console.log(job.id, job.payloadPreview, job.payloadTruncated ? '…' : '');
   */
  async listJobs(filter: ListJobsFilter & { payloadPreviewChars: number }): Promise<JobSummary[]>;
  async listJobs(filter?: ListJobsFilter & { payloadPreviewChars?: undefined }): Promise<JobRecord[]>;
  async listJobs(filter?: ListJobsFilter): Promise<JobRecord[] | JobSummary[]>;
  async listJobs(filter: ListJobsFilter = {}): Promise<JobRecord[] | JobSummary[]> {
    this.#assertOpen();
    return listJobs(this.#queries, this.#pool, filter);
  }

  /**
   * A page of the archive (jobs moved to `jobs_archive` on success), newest
   * finish first; pass the last job's `cursor` as `before` for the next page.
   * Each payload is read only as its first `payloadPreviewChars` characters.
   * Searches by `tags` and by `payload` fields go through the archive's GIN
   * indexes (see docs/operations.md): a search for a rare tag or value stays
   * fast however large the archive.
   *
   * @throws {ValidationError} naming the field on a bad filter (an unknown
   *   option, a bad tag, a payload filter that is not an object of at least
   *   one field or is over 4096 bytes of JSON, a bad cursor, `limit` outside
   *   1–1000).
   * @example
   * const page = await skiplock.listArchivedJobs({ tags: 'tenant:7', payload: { orderId: 42 } });
   * const next = await skiplock.listArchivedJobs({ tags: 'tenant:7', before: page.at(-1)!.cursor });
   */
  async listArchivedJobs(filter: ListArchivedJobsFilter = {}): Promise<ArchivedJobSummary[]> {
    this.#assertOpen();
    return listArchivedJobs(this.#queries, this.#pool, filter);
  }

  /**
   * Runs one sweep now (workers also sweep on their own): reclaims running jobs
   * whose lease outlived their visibility timeout, and ends queued jobs past
   * their start deadline as `cancelled` (expired).
   *
   * @param defaultVisibilityTimeoutMs - for running rows with no timeout of their own, in
   *   milliseconds: an integer from 100 (a worker's shortest) to 2,147,483,647. @default 300_000
   * @throws {ValidationError} naming `defaultVisibilityTimeoutMs` when it is out of that range.
   */
  async sweep(defaultVisibilityTimeoutMs = DEFAULT_VISIBILITY_TIMEOUT_MS): Promise<SweepResult> {
    this.#assertOpen();
    const { min, max } = WORKER_NUMBER_OPTIONS.visibilityTimeoutMs;
    parseOptions(integerInRange(min, max), defaultVisibilityTimeoutMs, 'defaultVisibilityTimeoutMs');
    return sweepOnce(this.#pool, this.#queries, defaultVisibilityTimeoutMs);
  }

  /**
   * Stops this Skiplock's running workers gracefully and ends the pool it made
   * (a caller's pool stays open). Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all([...[...this.#workers].map((w) => w.stop()), this.#waiter?.close()]);
    if (this.#ownsPool) await this.#pool.end();
    else unlistenForPoolErrors(this.#pool);
  }

  /** What the enqueue calls run with, once this client is known to be open. */
  async #producer(): Promise<Producer> {
    this.#assertOpen();
    const tracing = this.#tracingOn ? await this.#loadTracing() : undefined;
    return {
      queries: this.#queries,
      pool: this.#pool,
      named: this.#named,
      tracing,
      maxPayloadBytes: this.#maxPayloadBytes,
    };
  }

  /** `@opentelemetry/api`, loaded once; a missing install fails every call alike. */
  #loadTracing(): Promise<JobTracing> {
    this.#tracing ??= loadTracing();
    return this.#tracing;
  }

  #assertOpen(): void {
    if (this.#closed) throw new SkiplockError('CLOSED', 'this Skiplock was closed');
  }
}

/** Skiplocks sharing a caller's pool, per pool: one `error` listener serves them all. */
const poolUsers = new WeakMap<pg.Pool, number>();

/** An idle pooled connection that dies (server restart, terminated backend) is replaced by the pool. */
function ignorePoolError(): void {}

function listenForPoolErrors(pool: pg.Pool): void {
  const users = poolUsers.get(pool) ?? 0;
  if (users === 0) pool.on('error', ignorePoolError);
  poolUsers.set(pool, users + 1);
}

function unlistenForPoolErrors(pool: pg.Pool): void {
  const users = (poolUsers.get(pool) ?? 1) - 1;
  poolUsers.set(pool, users);
  if (users === 0) pool.off('error', ignorePoolError);
}
