/**
 * The one seam between skiplock and the wire: anything with `query(text, values)`
 * (a pg Pool, Client, PoolClient, or the caller's own wrapper), plus the single
 * place where database errors are translated.
 */
import type pg from 'pg';
import { DatabaseError, SkiplockError } from '../errors.js';

/** A result as pg returns it: rows and the number of rows touched. */
export interface QueryResultLike<Row = Record<string, unknown>> {
  rows: Row[];
  rowCount: number | null;
}

/**
 * Anything that runs a parameterised query: a `pg.Pool`, `pg.Client`,
 * `pg.PoolClient`, or any object with this method. Producers accept one so that
 * a job commits or rolls back with the caller's transaction.
 */
export interface Queryable {
  // biome-ignore lint/suspicious/noExplicitAny: callers' wrappers type rows loosely; we only read what we select.
  query(text: string, values?: unknown[]): Promise<QueryResultLike<any>>;
}

/** A named, parameterised statement: pg prepares it once per connection. */
export interface Statement {
  name: string;
  text: string;
}

/**
 * Runs a statement as plain text with its parameters and translates any error.
 * Works on any {@link Queryable}, such as the caller's transaction client.
 *
 * @throws {DatabaseError} with the SQLSTATE of the server's error.
 */
export async function run<Row>(
  db: Queryable,
  statement: Statement,
  values: unknown[],
): Promise<QueryResultLike<Row>> {
  try {
    return (await db.query(statement.text, values)) as QueryResultLike<Row>;
  } catch (error) {
    throw translateError(error);
  }
}

/**
 * Runs a statement on a pg pool as a named prepared statement: parsed and
 * planned once per connection, which matters on the worker's hot path.
 *
 * @throws {DatabaseError} with the SQLSTATE of the server's error.
 */
export async function runPrepared<Row>(
  pool: Pick<pg.Pool, 'query'>,
  statement: Statement,
  values: unknown[],
): Promise<QueryResultLike<Row>> {
  try {
    return (await pool.query({
      name: statement.name,
      text: statement.text,
      values,
    })) as unknown as QueryResultLike<Row>;
  } catch (error) {
    throw translateError(error);
  }
}

/**
 * Whether a pool's statements go as named prepared statements (see
 * {@link runNamedIfKept}). One per pool's user: the first sign that the pool's
 * connections do not keep them turns it off for good.
 */
export interface NamedStatements {
  on: boolean;
}

/**
 * SQLSTATEs of a named statement the connection does not hold as node-postgres
 * believes (invalid_sql_statement_name, duplicate_prepared_statement): a
 * transaction pooler moved the client to another server connection, or the
 * server dropped its statements (`DISCARD ALL`, `DEALLOCATE`). The server
 * refused the statement before running it.
 */
const STATEMENT_NOT_KEPT = new Set(['26000', '42P05']);

/**
 * Runs a statement on a pg pool as a named prepared statement while
 * `named.on`, else as plain text. A refusal that says the connections do not
 * keep named statements (PgBouncer in transaction mode before 1.21, say) turns
 * `named.on` off and sends the same statement again as plain text: the
 * refused one never ran, so it is sent once in effect.
 *
 * @throws {DatabaseError} with the SQLSTATE of the server's error.
 */
export async function runNamedIfKept<Row>(
  pool: Pick<pg.Pool, 'query'>,
  statement: Statement,
  values: unknown[],
  named: NamedStatements,
): Promise<QueryResultLike<Row>> {
  if (named.on) {
    try {
      return await runPrepared<Row>(pool, statement, values);
    } catch (error) {
      if (!(error instanceof DatabaseError && STATEMENT_NOT_KEPT.has(error.sqlState ?? ''))) throw error;
      named.on = false;
    }
  }
  return run<Row>(pool as Queryable, statement, values);
}

/** SQLSTATEs after which the same statement can be tried again on a new connection. */
const TRANSIENT_SQLSTATE_CLASSES = ['08', '53', '57', '40'];

/**
 * Whether an error is worth retrying after a pause (connection lost, server
 * restarting, too many connections, serialization failure).
 */
export function isTransient(error: unknown): boolean {
  if (error instanceof DatabaseError) {
    if (error.sqlState === undefined) return true;
    return TRANSIENT_SQLSTATE_CLASSES.some((c) => error.sqlState!.startsWith(c));
  }
  return !(error instanceof SkiplockError);
}

/**
 * Whether the server refused a statement for a value in it (SQLSTATE class 22,
 * data exception: an interval out of range, say; or 23, integrity constraint
 * violation): the statement failed, wrote nothing, and another without that
 * row may succeed.
 */
export function isRowDataError(error: unknown): boolean {
  return error instanceof DatabaseError && /^2[23]/.test(error.sqlState ?? '');
}

/**
 * What a statement past its client-side deadline fails with: node-postgres's
 * words for its `query_timeout`, which the worker's own deadline
 * (statement-deadline.ts) uses too.
 */
export const READ_TIMEOUT_MESSAGE = 'Query read timeout';

/**
 * Whether a statement failed on a deadline: the client-side one
 * (node-postgres's read timeout) or the server's `statement_timeout` (SQLSTATE
 * 57014, also a cancel).
 */
export function isTimeout(error: unknown): boolean {
  const failure = translateError(error);
  return (
    (failure instanceof DatabaseError && failure.sqlState === '57014') ||
    failure.message.startsWith(READ_TIMEOUT_MESSAGE)
  );
}

/** Turns a pg or socket error into a {@link DatabaseError}; skiplock errors pass through. */
export function translateError(error: unknown): SkiplockError {
  if (error instanceof SkiplockError) return error;
  const err = error as { code?: unknown; message?: unknown };
  const sqlState = typeof err?.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : undefined;
  let message = typeof err?.message === 'string' ? err.message : String(error);
  // node-postgres's statement deadline, named after the option that sets it.
  if (message === READ_TIMEOUT_MESSAGE)
    message += ': no answer within the statement deadline (statementTimeoutMs)';
  // undefined_table: almost always a schema nobody migrated.
  if (sqlState === '42P01')
    message +=
      '; is the skiplock schema migrated? run migrate() or `skiplock migrate` on the same schema (--schema)';
  // protocol_violation at connect: a pooler (PgBouncer) refusing the worker's startup options.
  if (sqlState === '08P01' && message.includes('unsupported startup parameter'))
    message +=
      '; behind PgBouncer in transaction mode, give the worker sessionSettings: false (--no-session-settings)';
  return new DatabaseError(sqlState ? `${message} (SQLSTATE ${sqlState})` : message, sqlState, {
    cause: error,
  });
}

/**
 * Runs `fn` inside BEGIN … COMMIT on one pooled connection; rolls back on error
 * and discards a connection that broke. `readCommitted` pins the isolation
 * level whatever the session's default, so each statement reads a fresh
 * snapshot. The transaction sets `idle_in_transaction_session_timeout` so a
 * frozen process cannot hold locks or a snapshot for long: a long transaction
 * stalls VACUUM for every table.
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient) => Promise<T>,
  idleInTransactionTimeoutMs = 60_000,
  readCommitted = false,
): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw translateError(error);
  }
  let broken: unknown;
  // A checked-out client whose connection dies between statements emits 'error';
  // unheard, that would crash the process. The failing statement reports it instead.
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    return await transactionOn(client, fn, idleInTransactionTimeoutMs, readCommitted, (rollbackError) => {
      broken = rollbackError;
    });
  } finally {
    client.off('error', onError);
    client.release(broken instanceof Error ? broken : undefined);
  }
}

/**
 * Runs `fn` inside BEGIN … COMMIT on `client`, a connection outside a
 * transaction (see {@link withTransaction} for `idleInTransactionTimeoutMs`
 * and `readCommitted`); rolls back on error and throws it translated. A
 * ROLLBACK that fails too (a broken connection) is passed to `onBroken`.
 */
export async function transactionOn<C extends Queryable, T>(
  client: C,
  fn: (client: C) => Promise<T>,
  idleInTransactionTimeoutMs = 60_000,
  readCommitted = false,
  onBroken?: (rollbackError: unknown) => void,
): Promise<T> {
  try {
    await client.query(readCommitted ? 'BEGIN ISOLATION LEVEL READ COMMITTED' : 'BEGIN');
    await client.query("SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', $1, true)", [
      String(idleInTransactionTimeoutMs),
    ]);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      onBroken?.(rollbackError);
    }
    throw translateError(error);
  }
}
