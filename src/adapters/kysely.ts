/**
 * Kysely: enqueue (and every call that takes `client`) inside a Kysely
 * transaction, `db.transaction().execute(async (trx) => …)`, so the job
 * commits or rolls back with it. Works with any Kysely PostgreSQL dialect.
 *
 * @example
 * import { fromKysely } from 'skiplock/kysely';
 *
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: 42 }).execute();
 *   await skiplock.enqueue('send_invoice_email', { orderId: 42 }, { client: fromKysely(trx) });
 * });
 */
import type { CompiledQuery, QueryResult } from 'kysely';
import type { Queryable } from '../db/executor.js';
import { importOptional } from '../optional-dependency.js';
import { toParameters, toResult } from './values.js';

// Loaded here so that a missing install is the same MissingDependencyError as every optional package's.
const kysely = await importOptional<typeof import('kysely')>('kysely', {
  packageName: 'kysely',
  neededFor: 'skiplock/kysely',
});

/**
 * The part of a `Kysely` instance or `Transaction` that skiplock uses:
 * `executeQuery`, and `withoutPlugins` when there is one.
 */
export interface KyselyExecutor {
  executeQuery<R>(query: CompiledQuery<R>): Promise<QueryResult<R>>;
  withoutPlugins?(): KyselyExecutor;
}

/**
 * Wraps a Kysely transaction (or the `Kysely` instance, outside a transaction)
 * as a connection skiplock can run its statements on, through
 * `CompiledQuery.raw(text, parameters)`: parameters are bound, never spliced.
 *
 * Importing `skiplock/kysely` without `kysely` installed throws a
 * `MissingDependencyError` naming it.
 * Your plugins stay out of skiplock's statements (a `CamelCasePlugin` would
 * rename the columns skiplock reads).
 */
export function fromKysely(db: KyselyExecutor): Queryable {
  const plain = db.withoutPlugins?.() ?? db;
  return {
    async query(text, values) {
      const result = await plain.executeQuery(kysely.CompiledQuery.raw(text, toParameters(values)));
      return toResult(result.rows, result.numAffectedRows);
    },
  };
}
