/**
 * Prisma: enqueue (and every call that takes `client`) inside a Prisma
 * interactive transaction, `prisma.$transaction(async (tx) => …)`, so the job
 * commits or rolls back with it.
 *
 * @example
 * import { fromPrisma } from 'skiplock/prisma';
 *
 * await prisma.$transaction(async (tx) => {
 *   await tx.order.create({ data: { id: 42 } });
 *   await skiplock.enqueue('send_invoice_email', { orderId: 42 }, { client: fromPrisma(tx) });
 * });
 */
import type { Queryable } from '../db/executor.js';
import { toParameters, toResult } from './values.js';

/** The part of a Prisma client or interactive transaction that skiplock uses: `$queryRawUnsafe`. */
export interface PrismaExecutor {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma types its values by their JavaScript type.
  $queryRawUnsafe(query: string, ...values: any[]): PromiseLike<unknown>;
}

/**
 * Wraps a Prisma interactive transaction (or the client, outside a
 * transaction) as a connection skiplock can run its statements on, through
 * `$queryRawUnsafe(text, ...values)`: parameters are bound, never spliced.
 * Prisma reports no row count for a query, so `rowCount` is the number of
 * rows returned (skiplock's statements read rows, not counts). BigInt values
 * come back as decimal text, as with pg.
 */
export function fromPrisma(prisma: PrismaExecutor): Queryable {
  return {
    async query(text, values) {
      const rows = (await prisma.$queryRawUnsafe(text, ...toParameters(values))) as unknown[];
      return toResult(rows, rows.length);
    },
  };
}
