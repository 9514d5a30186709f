/**
 * A transaction held open on one pooled connection while other code (a
 * transactional handler) runs statements on it. Its own statements (BEGIN,
 * COMMIT, ROLLBACK) have a deadline: one that does not answer in time has its
 * socket dropped, which the server takes as a rollback. A connection that
 * broke, or whose transaction state is unknown, is destroyed on release,
 * never returned to the pool inside a transaction.
 */
import type pg from 'pg';
import { translateError } from './executor.js';

/**
 * Opens the transaction. The idle timeout is set with SET LOCAL, which takes
 * no snapshot, so the handler may still choose the isolation level as its first
 * statement. One round trip (simple query protocol, no parameters).
 */
const BEGIN = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '60s'";

/** One transaction on one checked-out connection. */
export class HeldTransaction {
  readonly client: pg.PoolClient;
  readonly #deadlineMs: number;
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
   */
  constructor(client: pg.PoolClient, deadlineMs: number) {
    this.client = client;
    this.#deadlineMs = deadlineMs;
    // A checked-out client whose connection dies emits 'error'; unheard, that would crash the process.
    client.on('error', this.#onError);
  }

  /** Checks out a connection of `pool` and wraps it. @throws {DatabaseError} when none can be had. */
  static async checkOut(pool: pg.Pool, deadlineMs: number): Promise<HeldTransaction> {
    try {
      return new HeldTransaction(await pool.connect(), deadlineMs);
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
   * Drops the connection now: whatever the transaction did is rolled back by
   * the server, and statements queued on the client (a handler still running)
   * fail instead of running outside the transaction.
   */
  destroy(reason: unknown): void {
    this.#broken ??= reason instanceof Error ? reason : new Error(String(reason));
    this.release();
  }

  /** Returns the connection to the pool, or destroys it if it broke or still holds a transaction. Idempotent. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    if (this.#open) this.#broken ??= new Error('released inside a transaction');
    if (this.#broken === undefined) this.client.off('error', this.#onError);
    this.client.release(this.#broken);
  }

  /**
   * Waits for `statement` (sent on this connection) within the deadline. One
   * that fails or does not answer in time leaves the connection broken: it is
   * destroyed on release (at once when late).
   *
   * @throws {DatabaseError} what the statement threw, or that it did not answer.
   */
  async bounded<T>(statement: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        statement,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const error = new Error(`${what} did not answer within ${this.#deadlineMs} ms`);
            this.destroy(error);
            reject(error);
          }, this.#deadlineMs);
        }),
      ]);
    } catch (error) {
      this.#broken ??= error instanceof Error ? error : new Error(String(error));
      throw translateError(error);
    } finally {
      clearTimeout(timer);
    }
  }

  async #run(text: 'COMMIT' | 'ROLLBACK' | typeof BEGIN): Promise<void> {
    await this.bounded(this.client.query(text), text === BEGIN ? 'BEGIN' : text);
  }
}
