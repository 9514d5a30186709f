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

/** The part of a `Kysely` instance or `Transaction` that skiplock uses: `executeQuery`. */
export interface KyselyExecutor {
  executeQuery<R>(query: CompiledQuery<R>): Promise<QueryResult<R>>;
}

/**
 * Wraps a Kysely transaction (or the `Kysely` instance, outside a transaction)
 * as a connection skiplock can run its statements on, through
 * `CompiledQuery.raw(text, parameters)`: parameters are bound, never spliced.
 *
 * Importing `skiplock/kysely` without `kysely` installed throws a
 * `MissingDependencyError` naming it.
 */
export function fromKysely(db: KyselyExecutor): Queryable {
  return {
    async query(text, values) {
      const result = await db.executeQuery(kysely.CompiledQuery.raw(text, toParameters(values)));
      return toResult(result.rows, result.numAffectedRows);
    },
  };
}
