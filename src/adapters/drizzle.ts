/**
 * Drizzle ORM: enqueue (and every call that takes `client`) inside a Drizzle
 * transaction, `db.transaction(async (tx) => …)`, with the node-postgres or the
 * postgres.js driver, so the job commits or rolls back with it.
 *
 * @example
 * import { fromDrizzle } from 'skiplock/drizzle';
 *
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: 42 });
 *   await skiplock.enqueue('send_invoice_email', { orderId: 42 }, { client: fromDrizzle(tx) });
 * });
 */
import type { SQL } from 'drizzle-orm';
import type { Queryable } from '../db/executor.js';
import { importOptional } from '../optional-dependency.js';
import { type ColumnLike, toArrayTextParameters, toResult } from './values.js';

// Loaded here so that a missing install is the same MissingDependencyError as every optional package's.
const { sql } = await importOptional<typeof import('drizzle-orm')>('drizzle-orm', {
  packageName: 'drizzle-orm',
  neededFor: 'skiplock/drizzle',
});

/** The part of a Drizzle PostgreSQL database or transaction that skiplock uses: `execute(sql)`. */
export interface DrizzleExecutor {
  execute(query: SQL): PromiseLike<unknown>;
}

/** A placeholder of skiplock's statements: `$1`, `$2`, … */
const PLACEHOLDER = /\$(\d+)/g;

/**
 * Wraps a Drizzle transaction (or database, outside a transaction) as a
 * connection skiplock can run its statements on. The statement becomes a
 * Drizzle `SQL` whose placeholders are `sql.param` values, so parameters are
 * bound, never spliced; `sql.raw(text)` alone would bind nothing.
 *
 * Importing `skiplock/drizzle` without `drizzle-orm` installed throws a
 * `MissingDependencyError` naming it.
 */
export function fromDrizzle(db: DrizzleExecutor): Queryable {
  return {
    async query(text, values) {
      // Arrays go as array text: Drizzle's postgres.js driver turns off the
      // driver's date serialisers, which its array serialiser then lacks.
      let result: unknown;
      try {
        result = await db.execute(toDrizzleSql(text, toArrayTextParameters(values)));
      } catch (error) {
        throw driverError(error);
      }
      return readResult(result);
    },
  };
}

/**
 * The driver's own error inside Drizzle's wrapper (`DrizzleQueryError`, whose
 * message lists the parameters): it carries the SQLSTATE (`code`) that
 * skiplock acts on, such as 40P01 or 25P01, and the server's message.
 */
function driverError(error: unknown): unknown {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  return typeof cause?.code === 'string' ? cause : error;
}

/** Splits `text` at its `$n` placeholders and puts each value in as a bound parameter. */
function toDrizzleSql(text: string, values: readonly unknown[]): SQL {
  const chunks: SQL[] = [];
  let last = 0;
  for (const match of text.matchAll(PLACEHOLDER)) {
    const index = Number(match[1]) - 1;
    if (index < 0 || index >= values.length) {
      throw new RangeError(`statement uses $${match[1]} but ${values.length} values were given`);
    }
    chunks.push(sql.raw(text.slice(last, match.index)), sql`${sql.param(values[index])}`);
    last = match.index + match[0].length;
  }
  chunks.push(sql.raw(text.slice(last)));
  return sql.join(chunks);
}

/** node-postgres returns `{ rows, rowCount, fields }`; postgres.js an array with `count` and `columns`. */
function readResult(result: unknown) {
  if (Array.isArray(result)) {
    const list = result as unknown[] & { count?: number | null; columns?: readonly ColumnLike[] };
    return toResult(list, list.count, list.columns);
  }
  const pgResult = result as {
    rows: unknown[];
    rowCount?: number | null;
    fields?: readonly { name: string; dataTypeID: number }[];
  };
  return toResult(
    pgResult.rows,
    pgResult.rowCount,
    pgResult.fields?.map((f) => ({ name: f.name, type: f.dataTypeID })),
  );
}
