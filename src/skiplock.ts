/**
 * The Skiplock entry (SPEC §7): configuration, migrate, the producer (enqueue,
 * enqueueMany), operations (requeue, stats, getJob, listJobs, sweep) and
 * `worker()`.
 */
import pg from 'pg';
import { z } from 'zod';
import { type Queryable, translateError } from './db/executor.js';
import { type JobFilter, JobQueries, type NewJob, type QueueStatsRow } from './db/queries/jobs.js';
import { assertSchemaName, DEFAULT_SCHEMA } from './db/sql.js';
import { SkiplockError, ValidationError } from './errors.js';
import {
  assertName,
  JOB_STATUSES,
  type Job,
  type JobMap,
  type JobRecord,
  type JobStatus,
  serializePayload,
  toJob,
} from './job/job.js';
import { type SweepResult, sweep as sweepOnce } from './maintenance/sweeper.js';
import { type MigrateResult, migrate } from './migrations/migrator.js';
import { int32, parseOptions, validDate } from './options.js';
import { resolveWorkerOptions, type WorkerOptions } from './worker/options.js';
import { Worker } from './worker/worker.js';

/** How to reach the database. Give `pool` or `connectionString` (else `DATABASE_URL` is used). */
export interface SkiplockConfig {
  /** A pg Pool of the caller's; `close()` leaves it open. skiplock adds an `error` listener to it while open. */
  pool?: pg.Pool;
  /** A PostgreSQL URL; skiplock makes (and closes) its own pool. */
  connectionString?: string;
  /** Schema of the jobs table; any name, always quoted. @default 'skiplock' */
  schema?: string;
}

/** Options of one enqueued job. Give `runAt` or `delayMs`, not both. */
export interface JobOptions {
  /** Queue name (any non-empty string). @default 'default' */
  queue?: string;
  /** Larger runs first; a 32-bit integer. @default 0 */
  priority?: number;
  /** Earliest time to run. @default now (database clock) */
  runAt?: Date;
  /** Milliseconds from now (database clock) before the job may run; ≥ 0. @default 0 */
  delayMs?: number;
  /** Attempts before the dead letter; an integer ≥ 1. @default 20 */
  maxAttempts?: number;
}

/** Options of `enqueue`: the job's options and the caller's connection. */
export interface EnqueueOptions extends JobOptions {
  /**
   * The caller's connection, inside its BEGIN … COMMIT: the job commits or rolls
   * back with the caller's transaction, and wakes workers only on commit.
   * Any object with `query(text, values)`. @default skiplock's pool (autocommit)
   */
  client?: Queryable;
}

/** One job of `enqueueMany`, typed by the kind → payload map. */
export type EnqueueManyItem<Jobs extends JobMap> = {
  [Kind in keyof Jobs & string]: { kind: Kind; payload: Jobs[Kind] } & JobOptions;
}[keyof Jobs & string];

/** Which dead/failed jobs to requeue; all given fields must match. */
export interface RequeueFilter {
  /** Job ids (decimal strings). */
  ids?: string[];
  /** `dead`, `failed`, or both. @default both */
  status?: 'dead' | 'failed' | ('dead' | 'failed')[];
  kind?: string | string[];
  queue?: string | string[];
}

/** Filter of `listJobs`. */
export interface ListJobsFilter {
  ids?: string[];
  status?: JobStatus | JobStatus[];
  kind?: string | string[];
  queue?: string | string[];
  /** Most jobs returned, oldest id first. @default 100 */
  limit?: number;
}

/** Counts per queue and status, and the oldest due queued job's age. */
export type QueueStats = QueueStatsRow;

const queryable = z.custom<Queryable>((v) => typeof (v as Queryable)?.query === 'function', {
  error: 'must be a connection with a query(text, values) method',
});
const maxAttempts = z
  .number({ error: 'must be a number' })
  .int({ error: 'must be an integer' })
  .min(1, { error: 'must be ≥ 1' })
  .max(2_147_483_647, { error: 'must fit a 32-bit integer' });
const delayMs = z
  .number({ error: 'must be a number of milliseconds' })
  .refine(Number.isFinite, { error: 'must be finite' })
  .refine((v) => v >= 0, { error: 'must be ≥ 0' })
  .refine((v) => v <= 315_360_000_000_000, { error: 'must be at most 10,000 years' });
const jobOptionShape = {
  queue: z.unknown().optional(),
  priority: int32.optional(),
  runAt: validDate.optional(),
  delayMs: delayMs.optional(),
  maxAttempts: maxAttempts.optional(),
};
const enqueueOptionsSchema = z.strictObject({ client: queryable.optional(), ...jobOptionShape });
const manyItemSchema = z.strictObject({ kind: z.unknown(), payload: z.unknown(), ...jobOptionShape });
const manyOptionsSchema = z.strictObject({ client: queryable.optional() });
const configSchema = z.strictObject({
  pool: z
    .custom<pg.Pool>(
      (v) => typeof (v as pg.Pool)?.query === 'function' && typeof (v as pg.Pool)?.connect === 'function',
      {
        error: 'must be a pg.Pool',
      },
    )
    .optional(),
  connectionString: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }).optional(),
  schema: z.unknown().optional(),
});
const storableName = z
  .string({ error: 'must be a string' })
  .refine((v) => !v.includes('\u0000') && v.isWellFormed(), { error: 'must be valid text without NUL' });
const stringList = z.union([storableName, z.array(storableName)], {
  error: 'must be a string or an array of strings',
});
const idList = z.array(
  z
    .string({ error: 'must be job ids (decimal strings)' })
    .refine((id) => /^[1-9][0-9]{0,18}$/.test(id) && BigInt(id) <= 9_223_372_036_854_775_807n, {
      error: 'must be job ids (decimal strings within bigint range)',
    }),
  { error: 'must be an array of job ids' },
);
const requeueSchema = z.strictObject({
  ids: idList.optional(),
  status: z
    .union([z.enum(['dead', 'failed']), z.array(z.enum(['dead', 'failed']))], {
      error: "must be 'dead' or 'failed'",
    })
    .optional(),
  kind: stringList.optional(),
  queue: stringList.optional(),
});
const listSchema = z.strictObject({
  ids: idList.optional(),
  status: z
    .union([z.enum(JOB_STATUSES), z.array(z.enum(JOB_STATUSES))], {
      error: `must be one of ${JOB_STATUSES.join(', ')}`,
    })
    .optional(),
  kind: stringList.optional(),
  queue: stringList.optional(),
  limit: z.number().int().min(1).max(100_000).optional(),
});

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
  readonly #clientConfig: pg.ClientConfig;
  readonly #queries: JobQueries;
  readonly #workers = new Set<Worker>();

  #closed = false;

  /**
   * @throws {ValidationError} on an unknown option, both or neither of `pool`
   *   and `connectionString` (without `DATABASE_URL`), or a bad schema name.
   */
  constructor(config: SkiplockConfig = {}) {
    const parsed = parseOptions(configSchema, config, '');
    const schema = parsed.schema === undefined ? DEFAULT_SCHEMA : parsed.schema;
    assertSchemaName(schema);
    this.schema = schema;
    if (parsed.pool && parsed.connectionString) {
      throw new ValidationError('connectionString', 'give either pool or connectionString, not both');
    }
    if (parsed.pool) {
      this.#pool = parsed.pool;
      this.#ownsPool = false;
      this.#clientConfig = { ...(parsed.pool as unknown as { options: pg.ClientConfig }).options };
    } else {
      const connectionString = parsed.connectionString ?? process.env.DATABASE_URL;
      if (!connectionString) {
        throw new ValidationError('connectionString', 'give pool or connectionString (or set DATABASE_URL)');
      }
      this.#clientConfig = { connectionString, application_name: 'skiplock' };
      this.#pool = new pg.Pool({ ...this.#clientConfig, max: 10 });
      this.#ownsPool = true;
    }
    listenForPoolErrors(this.#pool);
    this.#queries = new JobQueries(schema);
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
   * @throws {DatabaseError} when the database cannot be reached.
   */
  async migrate(): Promise<MigrateResult> {
    this.#assertOpen();
    try {
      return await migrate(this.#pool, this.schema);
    } catch (error) {
      throw translateError(error);
    }
  }

  /**
   * Enqueues one job (SPEC §4). With `options.client`, the insert runs on the
   * caller's connection and commits or rolls back with its transaction.
   *
   * @param kind - the job's kind (non-empty; any text).
   * @param payload - JSON arguments; `undefined` means `{}`.
   * @returns the job as inserted (id, runAt on the database clock, …).
   * @throws {ValidationError} naming the field (`payload.x`, `maxAttempts`…); nothing is inserted.
   * @throws {DatabaseError} from the database.
   */
  async enqueue<Kind extends keyof Jobs & string>(
    kind: Kind,
    payload: Jobs[Kind],
    options: EnqueueOptions = {},
  ): Promise<Job<Kind, Jobs[Kind]>> {
    this.#assertOpen();
    const parsed = parseOptions(enqueueOptionsSchema, options, 'options');
    const job = toNewJob(kind, payload, parsed, '');
    const record = await this.#queries.insertOne(parsed.client ?? this.#pool, job);
    return toJob(record) as Job<Kind, Jobs[Kind]>;
  }

  /**
   * Enqueues many jobs in one statement (all or none), in input order.
   *
   * @throws {ValidationError} naming the item and field (`jobs[3].delayMs`); nothing is inserted.
   * @throws {DatabaseError} from the database.
   */
  async enqueueMany(
    jobs: EnqueueManyItem<Jobs>[],
    options: { client?: Queryable } = {},
  ): Promise<Job<keyof Jobs & string, Jobs[keyof Jobs & string]>[]> {
    this.#assertOpen();
    if (!Array.isArray(jobs)) throw new ValidationError('jobs', 'must be an array');
    const parsed = parseOptions(manyOptionsSchema, options, 'options');
    if (jobs.length === 0) return [];
    const rows = jobs.map((item, i) => {
      const field = `jobs[${i}]`;
      const parsedItem = parseOptions(manyItemSchema, item, field);
      return toNewJob(parsedItem.kind, parsedItem.payload, parsedItem, `${field}.`);
    });
    const records = await this.#queries.insertMany(parsed.client ?? this.#pool, rows);
    return records.map(toJob) as Job<keyof Jobs & string, Jobs[keyof Jobs & string]>[];
  }

  /**
   * Makes a worker for the given handlers (SPEC §5). Call `start()` on it.
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
        onStop: (w) => this.#workers.delete(w),
      },
      resolved,
      options.handlers as never,
    );
    this.#workers.add(worker);
    return worker;
  }

  /**
   * Puts dead and/or failed jobs back to `queued` with attempts 0, run_at now
   * and last_error cleared (the guide's requeue), and wakes workers.
   *
   * @returns how many jobs were requeued.
   * @throws {ValidationError} on a bad filter.
   */
  async requeue(filter: RequeueFilter = {}): Promise<number> {
    this.#assertOpen();
    const parsed = parseOptions(requeueSchema, filter, 'filter');
    return this.#queries.requeue(this.#pool, toFilter(parsed));
  }

  /** Per queue and status: counts, and for queued jobs the age of the oldest due one (ms). */
  async stats(): Promise<QueueStats[]> {
    this.#assertOpen();
    return this.#queries.stats(this.#pool);
  }

  /**
   * One job by id, with its status and bookkeeping, or undefined when no such
   * job is in the jobs table (deleted on success, or archived).
   *
   * @throws {ValidationError} when `id` is not a decimal job id.
   */
  async getJob(id: string): Promise<JobRecord | undefined> {
    this.#assertOpen();
    parseOptions(idList, [id], 'id');
    return this.#queries.getById(this.#pool, id);
  }

  /** Jobs matching the filter, oldest id first. @throws {ValidationError} on a bad filter. */
  async listJobs(filter: ListJobsFilter = {}): Promise<JobRecord[]> {
    this.#assertOpen();
    const parsed = parseOptions(listSchema, filter, 'filter');
    return this.#queries.list(this.#pool, toFilter(parsed), parsed.limit ?? 100);
  }

  /**
   * Runs one sweep now (workers also sweep on their own): reclaims running jobs
   * whose lease outlived their visibility timeout.
   *
   * @param defaultVisibilityTimeoutMs - for running rows with no timeout of their own. @default 300_000
   */
  async sweep(defaultVisibilityTimeoutMs = 300_000): Promise<SweepResult> {
    this.#assertOpen();
    return sweepOnce(this.#pool, this.#queries, this.schema, defaultVisibilityTimeoutMs);
  }

  /**
   * Stops this Skiplock's running workers gracefully and ends the pool it made
   * (a caller's pool stays open). Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all([...this.#workers].map((w) => w.stop()));
    if (this.#ownsPool) await this.#pool.end();
    else unlistenForPoolErrors(this.#pool);
  }

  #assertOpen(): void {
    if (this.#closed) throw new SkiplockError('CLOSED', 'this Skiplock was closed');
  }
}

function toNewJob(
  kind: unknown,
  payload: unknown,
  options: {
    queue?: unknown;
    priority?: number | undefined;
    runAt?: Date | undefined;
    delayMs?: number | undefined;
    maxAttempts?: number | undefined;
  },
  prefix: string,
): NewJob {
  assertName(kind, `${prefix}kind`);
  const queue = options.queue === undefined ? 'default' : options.queue;
  assertName(queue, `${prefix}queue`);
  if (options.runAt !== undefined && options.delayMs !== undefined) {
    throw new ValidationError(`${prefix}delayMs`, 'give runAt or delayMs, not both');
  }
  return {
    kind,
    queue,
    payloadJson: serializePayload(payload, `${prefix}payload`),
    priority: options.priority ?? 0,
    runAt: options.runAt ?? null,
    delayMs: options.delayMs ?? null,
    maxAttempts: options.maxAttempts ?? 20,
  };
}

function toFilter(parsed: {
  ids?: string[] | undefined;
  status?: string | string[] | undefined;
  kind?: string | string[] | undefined;
  queue?: string | string[] | undefined;
}): JobFilter {
  const list = <T extends string>(v: T | T[] | undefined): T[] | undefined =>
    v === undefined ? undefined : Array.isArray(v) ? v : [v];
  const filter: JobFilter = {};
  if (parsed.ids) filter.ids = parsed.ids;
  const status = list(parsed.status) as JobStatus[] | undefined;
  if (status) filter.status = status;
  const kind = list(parsed.kind);
  if (kind) filter.kind = kind;
  const queue = list(parsed.queue);
  if (queue) filter.queue = queue;
  return filter;
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
