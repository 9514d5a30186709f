/**
 * Forward-only migrations: versioned `.sql` files beside this module,
 * applied in one transaction under a transaction-scoped advisory lock, recorded
 * one row per version in `<schema>.migrations`. Safe when many processes
 * migrate at once; refuses a database whose schema is newer than this library.
 * Versions need not be consecutive: every shipped version not yet recorded is
 * applied, in version order, so a version number left free and filled by a
 * later release is still applied to databases that already have higher ones.
 *
 * The versioned files hold the tables, indexes and data; the SQL functions
 * that change between versions, and their triggers, live once each, as they
 * are now, in `functions/*.sql`, which every run that applies a version runs
 * last in its transaction (each statement there replaces what it finds). A
 * change to them therefore ships with a new version, even one that holds only
 * a comment, so that databases already at the newest version get it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type pg from 'pg';
import { withTransaction } from '../db/executor.js';
import { advisoryLockKey, quoteIdent } from '../db/sql.js';
import { SchemaVersionError } from '../errors.js';

/** One migration file: `NNNN_name.sql`. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

const MIGRATIONS_DIR = new URL('.', import.meta.url);

/** One file of `functions/`: the current definition of some functions and their triggers. */
export interface FunctionsFile {
  name: string;
  sql: string;
}

/** The function files this library ships, in name order. */
export function loadFunctions(): FunctionsFile[] {
  const dir = new URL('functions/', MIGRATIONS_DIR);
  return readdirSync(dir)
    .filter((file) => /^[a-z0-9-]+\.sql$/.test(file))
    .sort()
    .map((file) => ({ name: file, sql: readFileSync(new URL(file, dir), 'utf8') }));
}

/** The migrations this library ships, in version order. */
export function loadMigrations(): Migration[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.slice(5, -4),
      sql: readFileSync(new URL(file, MIGRATIONS_DIR), 'utf8'),
    }));
}

/** What {@link migrate} did. */
export interface MigrateResult {
  /** Versions applied by this call, in order (empty when already current). */
  applied: number[];
  /** The schema's version after the call. */
  version: number;
}

/**
 * Brings `schema` up to the newest version this library ships.
 *
 * @param migrations - what to apply, in version order (the shipped files; tests pass their own).
 * @param functions - run after the migrations when any was applied (the shipped
 *   function files; tests that stop at an older version pass none).
 * @throws {SchemaVersionError} when the database's schema is newer than the
 *   library, or when a migration or a function file fails (nothing of the run is kept).
 * @throws {DatabaseError} when the database cannot be reached.
 */
export async function migrate(
  pool: pg.Pool,
  schema: string,
  migrations: readonly Migration[] = loadMigrations(),
  functions: readonly FunctionsFile[] = loadFunctions(),
): Promise<MigrateResult> {
  const latest = migrations.at(-1)?.version ?? 0;
  const s = quoteIdent(schema);
  const table = `${s}.migrations`;

  // Fast path without the lock: many workers start at once on a current schema.
  const recorded = await readVersions(pool, table);
  if (recorded !== undefined) {
    const current = Math.max(0, ...recorded);
    assertNotNewer(current, latest);
    if (migrations.every((m) => recorded.has(m.version))) return { applied: [], version: current };
  }

  return withTransaction(pool, async (client) => {
    await client.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))', [
      advisoryLockKey('migrate', schema),
    ]);
    // Unqualified names in migrations create objects in the schema, and resolve
    // pg_catalog first: PostgreSQL searches pg_catalog before a path that does
    // not name it, so nothing planted in the schema (a now(), a ceil()) shadows
    // a built-in. pg_temp, named, comes last.
    await client.query("SELECT pg_catalog.set_config('search_path', $1, true)", [`${s}, pg_temp`]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${table} (
         version    int         PRIMARY KEY,
         name       text        NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${table}`);
    const done = new Set(rows.map((r) => r.version));
    const version = Math.max(0, ...done);
    assertNotNewer(version, latest);
    const applied: number[] = [];
    for (const migration of migrations.filter((m) => !done.has(m.version))) {
      await runFile(client, migration.sql, `migration ${migration.version} (${migration.name})`);
      await client.query(`INSERT INTO ${table} (version, name) VALUES ($1, $2)`, [
        migration.version,
        migration.name,
      ]);
      applied.push(migration.version);
    }
    if (applied.length > 0)
      for (const file of functions) await runFile(client, file.sql, `functions/${file.name}`);
    return { applied, version: Math.max(version, latest) };
  });
}

async function runFile(client: pg.PoolClient, sql: string, what: string): Promise<void> {
  try {
    await client.query(sql);
  } catch (error) {
    throw new SchemaVersionError(`${what} failed: ${String(error)}`, { cause: error });
  }
}

/**
 * Checks that `schema` is migrated at least to this library's version, so a
 * worker on a forgotten migration fails at start instead of retrying forever.
 *
 * @throws {SchemaVersionError} when the schema is missing or older than the library.
 * @throws {DatabaseError} (or a pg error) when the database cannot be reached.
 */
export async function assertMigrated(pool: pg.Pool, schema: string): Promise<void> {
  const migrations = loadMigrations();
  const latest = migrations.at(-1)?.version ?? 0;
  const recorded = (await readVersions(pool, `${quoteIdent(schema)}.migrations`)) ?? new Set<number>();
  const missing = migrations.find((m) => !recorded.has(m.version));
  if (missing) {
    const version = Math.max(0, ...recorded);
    const state =
      version < latest ? `is at version ${version}` : `lacks migration ${missing.version} (${missing.name})`;
    // The command names the schema when it is not the default, quoted for a shell when it must be.
    const flag =
      schema === 'skiplock'
        ? ''
        : /^[A-Za-z0-9_]+$/.test(schema)
          ? ` --schema ${schema}`
          : ` --schema '${schema.replaceAll("'", "'\\''")}'`;
    throw new SchemaVersionError(
      `the skiplock schema ${JSON.stringify(schema)} ${state}, this library needs ${latest}: run migrate() (or \`skiplock migrate${flag}\`) first`,
      { databaseVersion: version, libraryVersion: latest },
    );
  }
}

/** The versions recorded in `table`, or undefined when the table does not exist. */
async function readVersions(pool: pg.Pool, table: string): Promise<Set<number> | undefined> {
  const { rows } = await pool.query<{ exists: boolean }>(
    'SELECT pg_catalog.to_regclass($1) IS NOT NULL AS exists',
    [table],
  );
  if (!rows[0]?.exists) return undefined;
  const result = await pool.query<{ version: number }>(`SELECT version FROM ${table}`);
  return new Set(result.rows.map((r) => r.version));
}

function assertNotNewer(version: number, latest: number): void {
  if (version > latest) {
    throw new SchemaVersionError(
      `the database's skiplock schema is at version ${version}, newer than this library's ${latest}; upgrade skiplock`,
      { databaseVersion: version, libraryVersion: latest },
    );
  }
}
