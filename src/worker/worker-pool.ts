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
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../job/defaults.js';
import { type Clock, systemClock } from '../runtime/clock.js';

/** Most connections a worker's own pool opens: claim (two halves of a large one), results, heartbeat, maintenance, release. */
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
      // Before the connection serves its first statement. A failure leaves the
      // session as the server set it: the client's deadline still holds.
      ...(sessionSettings
        ? {
            onConnect: (client: pg.ClientBase) =>
              client.query(SERVER_DEADLINE_SQL, [deadline]).then(noop, noop),
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
 * milliseconds fails and its connection is dropped ({@link watchStatements}).
 */
function openPool(
  config: pg.ClientConfig,
  settings: string[],
  poolConfig: pg.PoolConfig,
  clock: Clock,
  statementDeadlineMs?: number,
): WorkerPool {
  const options = [config.options, ...settings].filter(Boolean).join(' ');
  const clients = new Set<pg.Client>();
  const Client =
    statementDeadlineMs === undefined ? pg.Client : watchStatements(clients, statementDeadlineMs);
  const pool = new pg.Pool({ ...config, ...(options ? { options } : {}), ...poolConfig, Client });
  pool.on('connect', (client) => {
    clients.add(client);
    // A connection dropped while checked out reports an error with nobody else listening.
    client.on('error', noop);
  });
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

/** What node-postgres says of a statement past its client-side deadline; {@link translateError} names the option. */
const READ_TIMEOUT_MESSAGE = 'Query read timeout';

/**
 * The client class of a pool whose statements each have a client-side
 * deadline of `deadlineMs` milliseconds, kept by one timer for the pool's
 * connections (`clients`): a connection whose statement has had no answer
 * for that long is dropped, and the statement fails with node-postgres's
 * `Query read timeout`, as with its `query_timeout`. That option arms a
 * timer and wraps the callback of every statement; on a worker's hot path
 * it made V8 promote nearly every claimed job's objects to the old
 * generation (about 600 bytes a job, against about 20 without it), so the
 * worker's memory rose and fell by a third between major collections.
 * Each check is on the process's clock: the deadline is about the network.
 */
function watchStatements(clients: ReadonlySet<pg.Client>, deadlineMs: number): typeof pg.Client {
  const checkEveryMs = Math.max(10, Math.min(1_000, Math.floor(deadlineMs / 10)));
  // Checks run while a statement is in flight; a statement sent while none is pending arms one.
  let armed = false;
  const check = (): void => {
    armed = false;
    const now = systemClock.monotonic();
    let waiting = false;
    for (const client of clients) {
      const watched = client as WatchedClient;
      if (watched.sentAt === 0) continue;
      if (now - watched.sentAt < deadlineMs) waiting = true;
      else {
        watched.sentAt = 0;
        destroySocket(client, new Error(READ_TIMEOUT_MESSAGE));
      }
    }
    if (waiting) arm();
  };
  const arm = (): void => {
    armed = true;
    systemClock.setTimeout(check, checkEveryMs);
  };
  const query = pg.Client.prototype.query;
  class WatchedClient extends pg.Client {
    /** When the statement in flight was sent (monotonic milliseconds); 0 while none is. */
    sentAt = 0;
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      this.on('drain', () => {
        this.sentAt = 0;
      });
    }
  }
  // Every statement (the pool's, a transaction's) restarts the watch: the deadline is per statement.
  (WatchedClient.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (
    this: WatchedClient,
    config: unknown,
    values?: unknown,
    callback?: unknown,
  ) {
    this.sentAt = systemClock.monotonic() || Number.MIN_VALUE;
    if (!armed) arm();
    return (query as (...args: unknown[]) => unknown).call(this, config, values, callback);
  };
  return WatchedClient;
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

/**
 * Destroys a pg client's socket: its pending statement fails at once (with
 * `error` when given) and the pool lets it go.
 */
export function destroySocket(client: Pick<pg.Client, 'on'>, error?: Error): void {
  // pg exposes no public way to abandon a connection mid-statement; its stream is the socket.
  (
    client as unknown as { connection?: { stream?: { destroy(error?: Error): void } } }
  ).connection?.stream?.destroy(error);
}
