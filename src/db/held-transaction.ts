/**
 * A transaction held open on one pooled connection while other code (a
 * transactional handler) runs statements on it. Its own statements (BEGIN,
 * COMMIT, ROLLBACK) have a deadline: one that does not answer in time has its
 * socket dropped, which the server takes as a rollback. A connection that
 * broke, or whose transaction state is unknown, is destroyed on release,
 * never returned to the pool inside a transaction.
 */
import type pg from 'pg';
import { type Clock, systemClock } from '../runtime/clock.js';
import { translateError } from './executor.js';

/**
 * Opens the transaction. The idle timeout is set with SET LOCAL, which takes
 * no snapshot, so the handler may still choose the isolation level as its first
 * statement. One round trip (simple query protocol, no parameters).
 */
const BEGIN = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '60s'";

/**
 * Ends a session on the server. Dropping the socket alone is not enough: the
 * server notices a closed client only when it next reads from it, so a
 * statement it is running (a long query, a lock wait) runs on, holding the
 * transaction's locks. Sent while the connection is still open, so the pid is
 * its own and no other session's.
 */
const TERMINATE = 'SELECT pg_terminate_backend($1::int)';

/** How long a termination may take before the connection is dropped anyway (milliseconds). */
const TERMINATE_TIMEOUT_MS = 2_000;

/** One transaction on one checked-out connection. */
export class HeldTransaction {
  readonly client: pg.PoolClient;
  readonly #deadlineMs: number;
  readonly #clock: Clock;
  /** Another pool, which ends this connection's session on the server when it is dropped mid-transaction. */
  #terminator: Pick<pg.Pool, 'query'> | undefined;
  /** The termination of this connection's session, while in flight. */
  #terminating: Promise<unknown> | undefined;
  /** Why the connection cannot go back to the pool (it broke, or its transaction state is unknown). */
  #broken: Error | undefined;
  #open = false;
  #released = false;
  readonly #onError = (error: Error) => {
    this.#broken = error;
  };

  /**
   * @param deadlineMs - how long BEGIN, COMMIT and ROLLBACK may take before
   *   the connection is dropped (milliseconds).
   * @param clock - times those deadlines; defaults to the process's clock.
   */
  constructor(
    client: pg.PoolClient,
    deadlineMs: number,
    terminator?: Pick<pg.Pool, 'query'>,
    clock: Clock = systemClock,
  ) {
    this.client = client;
    this.#deadlineMs = deadlineMs;
    this.#terminator = terminator;
    this.#clock = clock;
    // A checked-out client whose connection dies emits 'error'; unheard, that would crash the process.
    client.on('error', this.#onError);
  }

  /**
   * Checks out a connection of `pool` and wraps it. With `terminator` (a pool
   * of other connections), a transaction dropped while open also has its
   * server session ended (see {@link HeldTransaction.destroy}). `clock` times
   * its deadlines (the process's clock by default).
   *
   * @throws {DatabaseError} when none can be had.
   */
  static async checkOut(
    pool: pg.Pool,
    deadlineMs: number,
    terminator?: Pick<pg.Pool, 'query'>,
    clock?: Clock,
  ): Promise<HeldTransaction> {
    try {
      return new HeldTransaction(await pool.connect(), deadlineMs, terminator, clock);
    } catch (error) {
      throw translateError(error);
    }
  }

  /** Whether the connection was destroyed (released with an error). */
  get destroyed(): boolean {
    return this.#released && this.#broken !== undefined;
  }

  /** BEGIN. @throws {DatabaseError} (the connection is then destroyed on release). */
  async begin(): Promise<void> {
    this.#open = true;
    await this.#run(BEGIN);
  }

  /**
   * COMMIT. A rejection means the answer did not come: the transaction may or
   * may not have committed (the caller reads where its rows stand).
   *
   * @throws {DatabaseError}
   */
  async commit(): Promise<void> {
    await this.#run('COMMIT');
    this.#open = false;
  }

  /** ROLLBACK, when a transaction is open and the connection usable; never rejects (a failure destroys it). */
  async rollback(): Promise<void> {
    if (!this.#open || this.#released) return;
    try {
      await this.#run('ROLLBACK');
      this.#open = false;
    } catch {
      // #run marked the connection broken.
    }
  }

  /**
   * Drops the connection: whatever the transaction did is rolled back by the
   * server, and statements queued on the client (a handler still running)
   * fail instead of running outside the transaction. With `terminate`, while
   * a transaction is open, its server session is terminated too (from the
   * terminator pool, within 2 s; the socket is dropped after that), so that a
   * statement still running there — a long query, a lock wait — does not hold
   * the transaction's locks after the attempt ended. Without it (a late
   * COMMIT), what the server is doing finishes on its own.
   */
  destroy(reason: unknown, terminate = false): void {
    this.#broken ??= reason instanceof Error ? reason : new Error(String(reason));
    const terminator = this.#terminator;
    const pid = (this.client as { processID?: unknown }).processID;
    this.#terminator = undefined;
    if (terminate && terminator !== undefined && this.#open && !this.#released && typeof pid === 'number') {
      let timer: unknown;
      this.#terminating = Promise.race([
        terminator.query(TERMINATE, [pid]),
        new Promise((resolve) => {
          timer = this.#clock.setTimeout(() => resolve(undefined), TERMINATE_TIMEOUT_MS, { keepAlive: true });
        }),
      ])
        .catch(() => {})
        .finally(() => this.#clock.clearTimeout(timer));
    }
    this.release();
  }

  /**
   * Returns the connection to the pool, or destroys it if it broke or still
   * holds a transaction (after a termination in flight, so that the session's
   * pid cannot have been reused meanwhile). Idempotent.
   */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    if (this.#open) this.#broken ??= new Error('released inside a transaction');
    const finish = () => {
      if (this.#broken === undefined) this.client.off('error', this.#onError);
      this.client.release(this.#broken);
    };
    if (this.#terminating) void this.#terminating.then(finish);
    else finish();
  }

  /**
   * Waits for `statement` (sent on this connection) within the deadline. One
   * that fails or does not answer in time leaves the connection broken: it is
   * destroyed on release (at once when late).
   *
   * @throws {DatabaseError} what the statement threw, or that it did not answer.
   */
  async bounded<T>(statement: Promise<T>, what: string): Promise<T> {
    let timer: unknown;
    try {
      return await Promise.race([
        statement,
        new Promise<never>((_, reject) => {
          timer = this.#clock.setTimeout(
            () => {
              const error = new Error(`${what} did not answer within ${this.#deadlineMs} ms`);
              this.destroy(error);
              reject(error);
            },
            this.#deadlineMs,
            { keepAlive: true },
          );
        }),
      ]);
    } catch (error) {
      this.#broken ??= error instanceof Error ? error : new Error(String(error));
      throw translateError(error);
    } finally {
      this.#clock.clearTimeout(timer);
    }
  }

  async #run(text: 'COMMIT' | 'ROLLBACK' | typeof BEGIN): Promise<void> {
    await this.bounded(this.client.query(text), text === BEGIN ? 'BEGIN' : text);
  }
}
