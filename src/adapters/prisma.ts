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
      let rows: unknown[];
      try {
        rows = (await prisma.$queryRawUnsafe(text, ...toParameters(values))) as unknown[];
      } catch (error) {
        throw driverError(error);
      }
      return toResult(rows, rows.length);
    },
  };
}

/** What Prisma reports of a failed raw query (P2010): the server's SQLSTATE and message, by Prisma version. */
interface PrismaRawQueryError {
  code?: unknown;
  meta?: {
    code?: unknown;
    message?: unknown;
    driverAdapterError?: { cause?: { originalCode?: unknown; code?: unknown; originalMessage?: unknown } };
  };
}

/**
 * A failed raw query as pg reports it: an error whose `code` is the server's
 * SQLSTATE (Prisma's own is `P2010` for every raw query), which skiplock acts
 * on (40P01, 25P01, 23505…). Prisma's error is kept as the cause; other
 * errors pass through.
 */
function driverError(error: unknown): unknown {
  const { code, meta } = (error ?? {}) as PrismaRawQueryError;
  if (code !== 'P2010') return error;
  const adapted = meta?.driverAdapterError?.cause;
  const sqlState = adapted?.originalCode ?? adapted?.code ?? meta?.code;
  if (typeof sqlState !== 'string') return error;
  const message = adapted?.originalMessage ?? meta?.message;
  return Object.assign(new Error(typeof message === 'string' ? message : String(error), { cause: error }), {
    code: sqlState,
  });
}
