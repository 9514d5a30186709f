/**
 * postgres.js: enqueue (and every call that takes `client`) inside a
 * postgres.js transaction, `sql.begin(async (tx) => …)`, so the job commits
 * or rolls back with it.
 *
 * @example
 * import postgres from 'postgres';
 * import { fromPostgresJs } from 'skiplock/postgres-js';
 *
 * const sql = postgres(process.env.DATABASE_URL);
 * await sql.begin(async (tx) => {
 *   await tx`INSERT INTO orders (id) VALUES (${42})`;
 *   await skiplock.enqueue('send_invoice_email', { orderId: 42 }, { client: fromPostgresJs(tx) });
 * });
 */
import type { Queryable } from '../db/executor.js';
import { type ColumnLike, toArrayTextParameters, toResult } from './values.js';

/** What skiplock reads of a postgres.js result: its rows (the result is an array), count and columns. */
export interface PostgresJsRows extends ReadonlyArray<unknown> {
  count: number | null;
  columns?: readonly ColumnLike[] | undefined;
}

/** The part of a postgres.js `Sql` or `TransactionSql` that skiplock uses: `unsafe(text, parameters)`. */
export interface PostgresJsSql {
  // biome-ignore lint/suspicious/noExplicitAny: postgres.js types its parameters by its own serializers.
  unsafe(query: string, parameters?: any[]): PromiseLike<PostgresJsRows>;
}

/**
 * Wraps a postgres.js transaction (or `sql` itself, outside a transaction) as
 * a connection skiplock can run its statements on. Parameters are bound, never
 * spliced into the text; arrays go as array text, typed by the statement's
 * casts (postgres.js would type `[false]` as a `boolean`, with or without
 * prepared statements).
 */
export function fromPostgresJs(sql: PostgresJsSql): Queryable {
  return {
    async query(text, values) {
      const result = await sql.unsafe(text, toArrayTextParameters(values));
      return toResult([...result], result.count, result.columns);
    },
  };
}
