/**
 * What `new Skiplock(config)` takes, and its validation.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { JobMap } from './job/job.js';
import { durationMs, integerInRange } from './options.js';
import type { JobOptions } from './producer/job-options.js';

/** How to reach the database. Give `pool` or `connectionString` (else `DATABASE_URL` is used). */
export interface SkiplockConfig {
  /** A pg Pool of the caller's; `close()` leaves it open. skiplock adds an `error` listener to it while open. */
  pool?: pg.Pool;
  /** A PostgreSQL URL; skiplock makes (and closes) its own pool. */
  connectionString?: string;
  /**
   * Client-side deadline, in milliseconds, for opening a connection of the pool
   * skiplock makes (TCP connect, TLS and authentication) or waiting for a free
   * one: past it the call fails with a `DatabaseError` (`timeout exceeded when
   * trying to connect`), so a server that accepts TCP and never answers fails
   * `enqueue`, `stats`, the dashboard… instead of hanging. Only with
   * `connectionString` (a pool of your own keeps its own settings).
   * @default 10_000
   */
  connectTimeoutMs?: number;
  /**
   * Client-side deadline, in milliseconds, of each statement on the pool
   * skiplock makes: past it the call fails with a `DatabaseError` (`Query read
   * timeout`) and the connection is discarded. A call that runs a transaction
   * (`enqueueMany` mixing keyed and plain jobs) fails within twice that: its
   * ROLLBACK waits as long. `migrate()` is not bound by it
   * (a migration of a large table may take long) but by `connectTimeoutMs`
   * only. Workers have their own (`statementTimeoutMs` of `worker()`). Only
   * with `connectionString`. The deadline is the client's: a call that fails on
   * it may still commit on the server (set a `statement_timeout` on the role to
   * have the server give up too), so an enqueue retried after such a failure
   * may insert a second job unless it has a `uniqueKey`.
   * @default 30_000
   */
  statementTimeoutMs?: number;
  /**
   * Largest payload `enqueue` and `enqueueMany` accept, in bytes of its UTF-8
   * JSON text (1 to 268435456, jsonb's own limit); a larger one is a
   * `ValidationError` naming `payload` (`jobs[i].payload`) and nothing is
   * inserted. Payloads should carry ids and small arguments: every claim reads
   * them. @default 1_048_576 (1 MiB, the message limit of Amazon SQS)
   */
  maxPayloadBytes?: number;
  /**
   * Schema of the jobs table; any name, always quoted, except names starting
   * with `pg_` and, unless {@link SkiplockConfig.allowSharedSchema}, `public`
   * and `information_schema`. @default 'skiplock'
   */
  schema?: string;
  /**
   * Lets `schema` be `public` or `information_schema`. Risky: every role finds
   * `public` on its default search path and, on PostgreSQL 14 and older (or
   * wherever `CREATE` on it was not revoked), every role may create objects in
   * it, so any role that can connect may plant a function or an operator there
   * that your roles' statements, and a superuser's, then run. Only for an
   * existing installation in such a schema, on a server where no untrusted role
   * has `CREATE` on it (see docs/security.md).
   * @default false
   */
  allowSharedSchema?: boolean;
  /**
   * OpenTelemetry tracing: an `enqueue` span (kind PRODUCER) around each
   * `enqueue`/`enqueueMany`, whose trace context is stored with its jobs, and
   * a `process` span (kind CONSUMER) around each attempt of this Skiplock's
   * workers, a child of that stored context and active while the handler runs.
   * Needs the optional package `@opentelemetry/api`, loaded on the first
   * enqueue or worker start; spans go to the globally registered tracer
   * provider and the context through the global propagator (set up by an
   * OpenTelemetry SDK). Off, nothing is loaded, stored or traced.
   * @default false
   */
  tracing?: boolean;
  /**
   * Send `enqueue`'s insert on skiplock's pool as a named prepared statement:
   * the server parses and plans it once per connection instead of on every
   * call. Behind a pooler that does not keep named statements (PgBouncer in
   * transaction mode before 1.21, or without `max_prepared_statements`) the
   * first refusal turns it off for this Skiplock, and that call's insert goes
   * again unnamed (the refused one never ran); `false` never sends one. An
   * insert on your own connection (`client`) always goes unnamed.
   * @default true
   */
  preparedStatements?: boolean;
  /**
   * Where `waitFor`'s LISTEN connection goes, when not where the Skiplock's
   * statements go: behind PgBouncer in transaction mode, a direct URL of the
   * server (LISTEN needs a session of its own; through a transaction pooler it
   * hears nothing, and `waitFor` then learns of a finished job only from its
   * poll, every 5 seconds). Workers take their own `listenConnectionString`.
   * @default the Skiplock's connection
   */
  listenConnectionString?: string;
}

/** Default of {@link SkiplockConfig.connectTimeoutMs}. */
export { DEFAULT_CONNECT_TIMEOUT_MS } from './job/defaults.js';
/** Default of {@link SkiplockConfig.statementTimeoutMs}. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;

/** Why a database URL is refused; the text never repeats the URL, which may hold a password. */
export const NOT_A_POSTGRES_URL =
  'not a postgres:// URL (expected postgres://user:password@host:port/database)';

/**
 * Whether `value` is a connection string skiplock accepts: a `postgres://` or
 * `postgresql://` URL, or node-postgres's Unix-socket forms (`socket:/dir?db=app`,
 * `/dir app`). A misspelled scheme (`postgress://`), another scheme (`http://`)
 * or text that is no URL (`localhost:5432/app`) is refused rather than read
 * by node-postgres as some other host.
 */
export function isPostgresUrl(value: string): boolean {
  if (value.startsWith('/')) return true;
  try {
    const { protocol } = new URL(value);
    return protocol === 'postgres:' || protocol === 'postgresql:' || protocol === 'socket:';
  } catch {
    return false;
  }
}

/** One job of `enqueueMany`, typed by the kind → payload map. */
export type EnqueueManyItem<Jobs extends JobMap> = {
  [Kind in keyof Jobs & string]: {
    kind: Kind;
    payload: Jobs[Kind];
    /**
     * A name for this item, local to the call, that other items' `dependsOn`
     * may use: the whole graph is inserted in one transaction, parents first.
     * Non-empty, unique in the call.
     */
    ref?: string | undefined;
  } & JobOptions;
}[keyof Jobs & string];

/** A database URL option: a non-empty `postgres://` or `postgresql://` URL (see {@link isPostgresUrl}). */
export const postgresUrl = z
  .string({ error: 'must be a string' })
  .min(1, { error: 'must not be empty' })
  .refine(isPostgresUrl, { error: NOT_A_POSTGRES_URL });

/** The shape of {@link SkiplockConfig}, checked by the constructor (the schema name is checked on its own). */
export const configSchema = z.strictObject({
  pool: z
    .custom<pg.Pool>(
      (v) => typeof (v as pg.Pool)?.query === 'function' && typeof (v as pg.Pool)?.connect === 'function',
      {
        error: 'must be a pg.Pool',
      },
    )
    .optional(),
  connectionString: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }).optional(),
  maxPayloadBytes: integerInRange(1, 2 ** 28).optional(),
  connectTimeoutMs: durationMs(1).optional(),
  statementTimeoutMs: durationMs(1).optional(),
  schema: z.unknown().optional(),
  allowSharedSchema: z.boolean({ error: 'must be a boolean' }).optional(),
  tracing: z.boolean({ error: 'must be a boolean' }).optional(),
  preparedStatements: z.boolean({ error: 'must be a boolean' }).optional(),
  listenConnectionString: postgresUrl.optional(),
});
