/**
 * The adapters accept each library's own transaction objects under strict
 * mode, return a Queryable that every producer call takes as `client`, and
 * refuse objects of the wrong library.
 */
import type { PrismaPromise } from '@prisma/client/runtime/client';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import type { Kysely, Transaction } from 'kysely';
import type { Sql, TransactionSql } from 'postgres';
import { describe, expectTypeOf, it } from 'vitest';
import { fromDrizzle } from '../src/adapters/drizzle.js';
import { fromKysely } from '../src/adapters/kysely.js';
import { fromPostgresJs } from '../src/adapters/postgres-js.js';
import { fromPrisma } from '../src/adapters/prisma.js';
import type { EnqueueOptions, Queryable } from '../src/index.js';

type Db = { orders: { id: number } };
type DrizzleNodePgTx = Parameters<Parameters<NodePgDatabase['transaction']>[0]>[0];
type DrizzlePostgresJsTx = Parameters<Parameters<PostgresJsDatabase['transaction']>[0]>[0];
/** The signature `prisma generate` writes on PrismaClient and on its transaction client. */
interface GeneratedPrismaTx {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma's own signature.
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): PrismaPromise<T>;
}

describe('adapters', () => {
  it('take each library’s transaction and database objects', () => {
    expectTypeOf(fromPostgresJs).toBeCallableWith({} as TransactionSql);
    expectTypeOf(fromPostgresJs).toBeCallableWith({} as Sql);
    expectTypeOf(fromKysely).toBeCallableWith({} as Transaction<Db>);
    expectTypeOf(fromKysely).toBeCallableWith({} as Kysely<Db>);
    expectTypeOf(fromDrizzle).toBeCallableWith({} as DrizzleNodePgTx);
    expectTypeOf(fromDrizzle).toBeCallableWith({} as DrizzlePostgresJsTx);
    expectTypeOf(fromDrizzle).toBeCallableWith({} as NodePgDatabase);
    expectTypeOf(fromDrizzle).toBeCallableWith({} as PostgresJsDatabase);
    expectTypeOf(fromPrisma).toBeCallableWith({} as GeneratedPrismaTx);
  });

  it('return a Queryable that producer calls take as client', () => {
    expectTypeOf(fromPostgresJs({} as TransactionSql)).toEqualTypeOf<Queryable>();
    expectTypeOf(fromKysely({} as Transaction<Db>)).toEqualTypeOf<Queryable>();
    expectTypeOf(fromDrizzle({} as DrizzleNodePgTx)).toEqualTypeOf<Queryable>();
    expectTypeOf(fromPrisma({} as GeneratedPrismaTx)).toEqualTypeOf<Queryable>();
    expectTypeOf<{ client: Queryable }>().toExtend<EnqueueOptions>();
  });

  it('refuse objects of another library', () => {
    // @ts-expect-error a Kysely transaction has no unsafe()
    fromPostgresJs({} as Transaction<Db>);
    // @ts-expect-error a postgres.js transaction has no executeQuery()
    fromKysely({} as TransactionSql);
    // @ts-expect-error a Prisma transaction has no execute()
    fromDrizzle({} as GeneratedPrismaTx);
    // @ts-expect-error a Drizzle transaction has no $queryRawUnsafe()
    fromPrisma({} as DrizzleNodePgTx);
  });
});
