/**
 * A client-side deadline for every statement of a pg pool: a server that
 * accepts a statement and never answers fails it instead of hanging it. And
 * the one way to drop a pg connection mid-statement ({@link destroySocket}).
 */
import type { Socket } from 'node:net';
import pg from 'pg';
import { systemClock } from '../runtime/clock.js';
import { READ_TIMEOUT_MESSAGE } from './executor.js';

/** A pg client's socket: pg exposes no public way to abandon a connection mid-statement. */
function socketOf(client: object): Socket | undefined {
  return (client as { connection?: { stream?: Socket } }).connection?.stream;
}

/**
 * Destroys a pg client's socket: its pending statement fails at once (with
 * `error` when given) and the pool lets it go.
 */
export function destroySocket(client: object, error?: Error): void {
  socketOf(client)?.destroy(error);
}

/** Monotonic milliseconds now, never 0 (0 marks a client with no statement running). */
function startedNow(): number {
  return systemClock.monotonic() || Number.MIN_VALUE;
}

/** How long a client's end() waits for the server to close the connection before dropping it, in milliseconds. */
const END_GRACE_MS = 1_000;

/**
 * Opens a pg pool (`config`, as `new pg.Pool` takes it, its `Client` class
 * included) whose statements each fail after `deadlineMs` milliseconds
 * without an answer, with node-postgres's `Query read timeout` (see
 * `translateError`), as its `query_timeout` would fail them; the connection
 * is dropped, so the pool opens a new one. The deadline is per statement,
 * counted from when it is sent or reaches the head of its client's queue: a
 * transaction may run longer in all. A client's `end()` drops its connection
 * after a second when the server does not close it (one that stopped
 * answering), so it never holds the process.
 *
 * One timer per pool checks the statements in flight, every tenth of the
 * deadline (10 ms to 1 s), on the process's clock. `query_timeout` arms a
 * timer and wraps the callback of every statement instead; on a worker's hot
 * path that kept nearly every claimed job's objects alive into V8's old
 * generation (about 600 bytes a job, against about 20 with this), so the
 * process's memory rose and fell by a third between major collections.
 */
export function poolWithStatementDeadline(config: pg.PoolConfig, deadlineMs: number): pg.Pool {
  // Every client of the pool from its construction to its end.
  const clients = new Set<WatchedClient>();
  const checkEveryMs = Math.max(10, Math.min(1_000, Math.floor(deadlineMs / 10)));
  // Checks run while a statement is in flight; a statement sent while none is pending arms one.
  let armed = false;
  const arm = (): void => {
    armed = true;
    systemClock.setTimeout(check, checkEveryMs);
  };
  const check = (): void => {
    armed = false;
    const now = systemClock.monotonic();
    let waiting = false;
    for (const client of clients) {
      if (client.sentAt === 0) continue;
      if (now - client.sentAt < deadlineMs) waiting = true;
      else {
        client.sentAt = 0;
        destroySocket(client, new Error(READ_TIMEOUT_MESSAGE));
      }
    }
    if (waiting) arm();
  };
  // A Client class given in `config` (a caller's own, say) is kept: this one extends it.
  const Base = (config.Client ?? pg.Client) as typeof pg.Client;
  class WatchedClient extends Base {
    /** When the statement now running was sent, or reached the head of the queue (monotonic milliseconds); 0 while none runs. */
    sentAt = 0;
    /** Statements given and not yet answered: the one running and those queued behind it. */
    pending = 0;
    constructor(clientConfig?: string | pg.ClientConfig) {
      super(clientConfig);
      // Watched from the start: the pool's onConnect statement runs before its 'connect' event.
      clients.add(this);
      this.once('end', () => clients.delete(this));
      // A connection dropped while checked out reports an error; its statements have it already.
      this.on('error', () => {});
      // One ReadyForQuery answers each statement: the next one queued starts its deadline then.
      (
        this as unknown as { connection: { on(event: 'readyForQuery', listener: () => void): void } }
      ).connection.on('readyForQuery', () => {
        if (this.pending > 0) this.pending--;
        this.sentAt = this.pending > 0 ? startedNow() : 0;
      });
    }
  }
  // A statement's deadline starts when it is sent, or when it reaches the head of the client's queue.
  (WatchedClient.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (
    this: WatchedClient,
    statement: unknown,
    values?: unknown,
    callback?: unknown,
  ) {
    const result = (Base.prototype.query as (...args: unknown[]) => unknown).call(
      this,
      statement,
      values,
      callback,
    );
    if (this.pending++ === 0) {
      this.sentAt = startedNow();
      if (!armed) arm();
    }
    return result;
  };
  // end() sends Terminate and waits for the server to close the socket, which a
  // server that stopped answering never does: the socket is dropped after a second.
  (WatchedClient.prototype as unknown as { end: (...args: unknown[]) => unknown }).end = function (
    this: WatchedClient,
    callback?: unknown,
  ) {
    const ended = (Base.prototype.end as (...args: unknown[]) => unknown).call(this, callback);
    const stream = socketOf(this);
    if (stream && !stream.destroyed) {
      const timer = setTimeout(() => stream.destroy(), END_GRACE_MS);
      stream.once('close', () => clearTimeout(timer));
    }
    return ended;
  };
  const pool = new pg.Pool({ ...config, Client: WatchedClient });
  return pool;
}
