/**
 * A real Prisma client for the adapter tests: `prisma generate` into
 * ./generated (once per checkout), then a PrismaClient on the pg driver
 * adapter (Prisma 7 runs its query compiler in-process, no engine binary).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = fileURLToPath(new URL('.', import.meta.url));
const prismaPackage = createRequire(import.meta.url).resolve('prisma/package.json');
const generated = new URL('./generated/client.ts', import.meta.url);

/** What the tests use of a generated PrismaClient. */
export interface PrismaLike extends PrismaTx {
  $transaction<T>(fn: (tx: PrismaTx) => Promise<T>): Promise<T>;
  $disconnect(): Promise<void>;
}

/** An interactive transaction client. */
export interface PrismaTx {
  // biome-ignore lint/suspicious/noExplicitAny: Prisma's own signature.
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): Promise<T>;
}

/** Generates the client if needed and connects it to `url`. */
export async function openPrisma(url: string): Promise<PrismaLike> {
  if (!existsSync(generated)) {
    // `generate` never runs the schema engine, but Prisma fetches it first
    // unless told where one is; machines without access to Prisma's binary
    // host still generate with this.
    const env = { ...process.env };
    env.PRISMA_SCHEMA_ENGINE_BINARY ??= process.execPath;
    await promisify(execFile)(
      process.execPath,
      [join(dirname(prismaPackage), 'build/index.js'), 'generate', '--schema', `${here}schema.prisma`],
      { env, cwd: here },
    );
  }
  const { PrismaClient } = (await import(generated.href)) as {
    PrismaClient: new (options: { adapter: unknown }) => PrismaLike;
  };
  const { PrismaPg } = await import('@prisma/adapter-pg');
  return new PrismaClient({ adapter: new PrismaPg({ connectionString: url }) });
}
