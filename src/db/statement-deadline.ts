/**
 * A client-side deadline for every statement of a pg pool: a server that
 * accepts a statement and never answers fails it instead of hanging it.
 */
import pg from 'pg';
import { systemClock } from '../runtime/clock.js';
import { READ_TIMEOUT_MESSAGE } from './executor.js';

/**
 * Opens a pg pool (`config`, as `new pg.Pool` takes it, its `Client` class
 * included) whose statements each
 * fail after `deadlineMs` milliseconds without an answer, with node-postgres's
 * `Query read timeout` (see `translateError`), as its `query_timeout` would
 * fail them; the connection is dropped, so the pool opens a new one. The
 * deadline is per statement: a transaction may run longer in all.
 *
 * One timer per pool checks the statements in flight, every tenth of the
 * deadline (10 ms to 1 s), on the process's clock. `query_timeout` arms a
 * timer and wraps the callback of every statement instead; on a worker's hot
 * path that kept nearly every claimed job's objects alive into V8's old
 * generation (about 600 bytes a job, against about 20 with this), so the
 * process's memory rose and fell by a third between major collections.
 */
export function poolWithStatementDeadline(config: pg.PoolConfig, deadlineMs: number): pg.Pool {
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
        // The statement fails with this error; the pool lets the connection go.
        (
          client as unknown as { connection?: { stream?: { destroy(error: Error): void } } }
        ).connection?.stream?.destroy(new Error(READ_TIMEOUT_MESSAGE));
      }
    }
    if (waiting) arm();
  };
  // A Client class given in `config` (a caller's own, say) is kept: this one extends it.
  const Base = (config.Client ?? pg.Client) as typeof pg.Client;
  class WatchedClient extends Base {
    /** When the statement in flight was sent (monotonic milliseconds); 0 while none is. */
    sentAt = 0;
    constructor(clientConfig?: string | pg.ClientConfig) {
      super(clientConfig);
      this.on('drain', () => {
        this.sentAt = 0;
      });
    }
  }
  // Each statement (the pool's own, or one of a transaction) starts its own deadline.
  (WatchedClient.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (
    this: WatchedClient,
    statement: unknown,
    values?: unknown,
    callback?: unknown,
  ) {
    this.sentAt = systemClock.monotonic() || Number.MIN_VALUE;
    if (!armed) arm();
    return (Base.prototype.query as (...args: unknown[]) => unknown).call(this, statement, values, callback);
  };
  const pool = new pg.Pool({ ...config, Client: WatchedClient });
  pool.on('connect', (client) => {
    clients.add(client as unknown as WatchedClient);
    // A connection dropped while checked out reports an error; the statement has it already.
    client.on('error', () => {});
  });
  pool.on('remove', (client) => clients.delete(client as unknown as WatchedClient));
  return pool;
}
