/**
 * Which database a command uses (SPEC §8): `--database-url`, else
 * `DATABASE_URL`, else the shared embedded server under `./.skiplock/`.
 */
import { Skiplock } from '../skiplock.js';
import { attachEmbedded, type EmbeddedServer, maskUrl } from './embedded.js';
import type { ConnectionFlags } from './flags.js';

/** A command's database: its URL, a Skiplock on it, and how to let go of both. */
export interface CliDatabase {
  /** Connection URL (may contain a password: print it only through `maskUrl`). */
  url: string;
  /** A Skiplock on the schema of `--schema`. */
  skiplock: Skiplock;
  /** Set when the URL is the embedded server's. */
  embedded: EmbeddedServer | undefined;
  /** Closes the Skiplock and leaves the embedded server (stopping it if this process was the last user). */
  close(): Promise<void>;
}

/**
 * Resolves the URL without connecting: the flag, then `DATABASE_URL`, then the
 * embedded server (started or joined). Prints the database in use to stderr,
 * password masked.
 *
 * @throws {EmbeddedServerError} when the embedded server is needed and cannot start.
 */
export async function resolveDatabaseUrl(
  flags: Pick<ConnectionFlags, 'databaseUrl'>,
): Promise<{ url: string; embedded: EmbeddedServer | undefined }> {
  const given = flags.databaseUrl ?? process.env.DATABASE_URL;
  if (given) {
    const from = flags.databaseUrl ? '--database-url' : 'DATABASE_URL';
    process.stderr.write(`skiplock: database ${maskUrl(given)} (from ${from})\n`);
    return { url: given, embedded: undefined };
  }
  const embedded = await attachEmbedded();
  process.stderr.write(
    `skiplock: database ${maskUrl(embedded.url)} (embedded PostgreSQL, data in ${embedded.dir}, ${embedded.started ? 'started' : 'already running'})\n`,
  );
  return { url: embedded.url, embedded };
}

/**
 * Opens the command's database.
 *
 * @throws {ValidationError} on a bad schema name.
 * @throws {EmbeddedServerError} when the embedded server cannot start.
 */
export async function openDatabase(flags: ConnectionFlags): Promise<CliDatabase> {
  const { url, embedded } = await resolveDatabaseUrl(flags);
  let skiplock: Skiplock;
  try {
    skiplock = new Skiplock({ connectionString: url, schema: flags.schema });
  } catch (error) {
    await embedded?.release();
    throw error;
  }
  return {
    url,
    skiplock,
    embedded,
    close: async () => {
      try {
        await skiplock.close();
      } finally {
        await embedded?.release();
      }
    },
  };
}

/** Runs `fn` with the command's database, and closes it whatever happens. */
export async function withDatabase<T>(
  flags: ConnectionFlags,
  fn: (db: CliDatabase) => Promise<T>,
): Promise<T> {
  const db = await openDatabase(flags);
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}
