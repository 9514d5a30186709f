/**
 * The worker's own connections. Its sessions commit asynchronously
 * (`synchronous_commit = off`): a claim, result, heartbeat or release lost in a
 * server crash leaves the job queued or running-then-reclaimed, so it runs
 * again — at-least-once holds, and each statement skips a WAL flush. Producers'
 * inserts never run here. Its sessions cannot idle in a transaction for long
 * (`idle_in_transaction_session_timeout`), every statement has a client-side
 * deadline, and closing the pool never waits past its own deadline: connections
 * that do not answer are destroyed (their leases expire and the sweeper
 * reclaims the jobs). Transactional handlers run on a pool of their own
 * ({@link transactionPool}).
 */
import pg from 'pg';
import { destroySocket, poolWithStatementDeadline } from '../db/statement-deadline.js';
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../job/defaults.js';
import { type Clock, systemClock } from '../runtime/clock.js';

/** Most connections a worker's own pool opens: claims, results, heartbeat, maintenance, releases, and the reads of control messages and probes. */
const WORKER_POOL_SIZE = 7;

/**
 * The server-side deadline of a worker session's statements (milliseconds): a
 * little under the client-side one, so that the server cancels a statement
 * past it, rolling back what it did, before the client gives up on it. A
 * client that gave up first would drop the connection while the server went
 * on: a claim committed then would hold its jobs for nobody until the
 * visibility timeout, their attempt charged.
 */
export function serverDeadlineMs(statementTimeoutMs: number): number {
  const deadline = statementTimeoutMs - Math.min(1_000, Math.ceil(statementTimeoutMs / 10));
  return Math.min(2_147_483_647, Math.max(1, deadline));
}

/**
 * Sets a session's `statement_timeout` to `$1` milliseconds, unless the
 * server's setting for the role or database is already lower (it is kept).
 */
const SERVER_DEADLINE_SQL = `SELECT pg_catalog.set_config('statement_timeout',
  (CASE WHEN s.ms > 0 AND s.ms < $1::pg_catalog.int8 THEN s.ms ELSE $1::pg_catalog.int8 END)::pg_catalog.text, false)
FROM (SELECT (pg_catalog.date_part('epoch',
        pg_catalog.current_setting('statement_timeout')::pg_catalog.interval) * 1000)::pg_catalog.int8 AS ms) s`;

/** A worker's pool and how to close it within a deadline. */
export interface WorkerPool {
  pool: pg.Pool;
  /**
   * Ends the pool; destroys the connections still busy shortly before
   * `timeoutMs`, and resolves within it. Never rejects.
   */
  close(timeoutMs: number): Promise<void>;
}

/**
 * Opens the worker's pool.
 *
 * @param statementTimeoutMs - client-side deadline of every statement: past it
 *   the statement fails and its connection is discarded. With session
 *   settings, the server's own deadline ({@link serverDeadlineMs}) ends it
 *   first.
 * @param sessionSettings - send the session settings in the startup packet;
 *   false behind a pooler that refuses startup options (PgBouncer).
 * @param clock - times close()'s deadline; defaults to the process's clock.
 */
export function workerPool(
  config: pg.ClientConfig,
  statementTimeoutMs: number,
  sessionSettings = true,
  clock: Clock = systemClock,
): WorkerPool {
  const deadline = serverDeadlineMs(statementTimeoutMs);
  return openPool(
    config,
    sessionSettings ? ['-c synchronous_commit=off', '-c idle_in_transaction_session_timeout=60000'] : [],
    {
      max: WORKER_POOL_SIZE,
      // A server that accepts TCP and never answers fails start() as soon as a Skiplock's own pool would.
      connectionTimeoutMillis: Math.min(statementTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS),
      // Before the connection serves its first statement. A refusal by the
      // server leaves the session as the server set it: the client's deadline
      // still holds. A connection lost meanwhile (its deadline passed, say)
      // serves nothing: the statement waiting for it fails with why.
      ...(sessionSettings
        ? {
            onConnect: (client: pg.ClientBase) =>
              client.query(SERVER_DEADLINE_SQL, [deadline]).then(noop, (error: unknown) => {
                if (!(error instanceof pg.DatabaseError)) throw error;
              }),
          }
        : {}),
    },
    clock,
    statementTimeoutMs,
  );
}

function noop(): void {}

/**
 * Opens the pool of transactional handlers, beside the worker's own so that a
 * slot holding a connection for its handler's run never starves claims,
 * results or heartbeats: one connection per slot (`concurrency`). Its commits
 * wait for the WAL flush as the server is configured (the handler's writes are
 * the application's data), and its statements have no client-side deadline
 * (the handler's own queries are bounded by the job's timeout; the worker
 * bounds its BEGIN, completion and COMMIT itself).
 */
export function transactionPool(
  config: pg.ClientConfig,
  concurrency: number,
  statementTimeoutMs: number,
  sessionSettings = true,
  clock: Clock = systemClock,
): WorkerPool {
  return openPool(
    config,
    sessionSettings ? ['-c idle_in_transaction_session_timeout=60000'] : [],
    { max: concurrency, connectionTimeoutMillis: statementTimeoutMs },
    clock,
  );
}

/**
 * Opens a pool whose close() keeps its deadline on `clock`; with
 * `statementDeadlineMs`, a statement without an answer after that many
 * milliseconds fails and its connection is dropped ({@link poolWithStatementDeadline}).
 */
function openPool(
  config: pg.ClientConfig,
  settings: string[],
  poolConfig: pg.PoolConfig,
  clock: Clock,
  statementDeadlineMs?: number,
): WorkerPool {
  const options = [config.options, ...settings].filter(Boolean).join(' ');
  const poolSettings = { ...config, ...(options ? { options } : {}), ...poolConfig };
  const pool =
    statementDeadlineMs === undefined
      ? new pg.Pool(poolSettings)
      : poolWithStatementDeadline(poolSettings, statementDeadlineMs);
  const clients = new Set<pg.Client>();
  pool.on('connect', (client) => clients.add(client));
  pool.on('remove', (client) => clients.delete(client));
  // An idle connection that dies (server restart, terminated backend) is replaced; the loops report the rest.
  pool.on('error', () => {});
  let ended: Promise<void> | undefined;
  return {
    pool,
    async close(timeoutMs) {
      const deadline = clock.monotonic() + timeoutMs;
      ended ??= pool.end().catch(() => {});
      // The last part of the time is for the end to settle once the sockets are dropped.
      if (await settlesWithin(ended, timeoutMs - Math.min(200, timeoutMs / 4), clock)) return;
      // A statement stuck behind a lock or a dead network: drop its socket; so
      // also for a connection still being opened (pg-pool lists those only in
      // its own field), which would otherwise outlive the stop by its timeout.
      const opening = (pool as unknown as { _clients?: pg.Client[] })._clients ?? [];
      for (const client of new Set([...clients, ...opening])) destroySocket(client);
      await settlesWithin(ended, deadline - clock.monotonic(), clock);
    },
  };
}

/**
 * Whether `promise` settled within `ms` on `clock`; the timer never outlives
 * the answer, and keeps the process alive until then (someone awaits it).
 */
export async function settlesWithin(
  promise: Promise<unknown>,
  ms: number,
  clock: Clock = systemClock,
): Promise<boolean> {
  let timer: unknown;
  const settled = await Promise.race([
    promise.then(
      () => true,
      () => true,
    ),
    new Promise<false>((resolve) => {
      timer = clock.setTimeout(() => resolve(false), Math.max(0, ms), { keepAlive: true });
    }),
  ]);
  clock.clearTimeout(timer);
  return settled;
}
