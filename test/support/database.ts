/**
 * Per-file isolation: each test file gets a database of its own on the suite's
 * server, migrated in the schema under test (`SKIPLOCK_TEST_SCHEMA`, default
 * `skiplock`), so files run in parallel. Set `SKIPLOCK_KEEP_DB=1` to keep the
 * databases for inspection. Most files use it through `useTestDatabase()`
 * (fixture.ts), which adds a schema per test.
 */
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import pg from 'pg';
import { inject } from 'vitest';
import { Skiplock } from '../../src/index.js';
import type { JobMap } from '../../src/job/job.js';
import { loadMigrations, migrate } from '../../src/migrations/migrator.js';
import { tableIn } from './sql.js';

export const TEST_SCHEMA = process.env.SKIPLOCK_TEST_SCHEMA ?? 'skiplock';

export { quoteIdent, tableIn } from './sql.js';

/** Anything that runs SQL: a pool, a client, a TestDatabase's pool. */
export interface Queryable {
  query<Row extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<Row>>;
}

/** `count(*)` of `table`, optionally with a WHERE clause on parameters. */
export async function countRows(db: Queryable, table: string, where = 'true', values: unknown[] = []) {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${table} WHERE ${where}`,
    values,
  );
  return rows[0]!.n;
}

export interface TestDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  /** A Skiplock on the file's database, in TEST_SCHEMA (migrated when the database was). */
  skiplock<Jobs extends JobMap = JobMap>(): Skiplock<Jobs>;
  /** Runs SQL on the file's database. */
  query<Row extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<Row[]>;
  /** TEST_SCHEMA's jobs table, quoted, for ad-hoc SQL in assertions. */
  jobs: string;
  /** TEST_SCHEMA's archive table, quoted. */
  archive: string;
  close(): Promise<void>;
}

/** The admin URL of the suite's server. */
export function adminUrl(): string {
  return inject('adminUrl');
}

/** A URL for `database` on the suite's server. */
export function urlFor(database: string): string {
  const url = new URL(adminUrl());
  url.pathname = `/${database}`;
  return url.toString();
}

/** Runs one statement on the suite's server as its admin (CREATE/DROP DATABASE, roles). */
export async function onServer(text: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    await admin.query(text);
  } finally {
    await admin.end();
  }
}

/**
 * A test database's handles, before the database exists: nothing connects
 * until `create` makes it (and migrates it in TEST_SCHEMA unless told not to).
 */
export function planTestDatabase(): { db: TestDatabase; create(migrateIt: boolean): Promise<void> } {
  const name = `skiplock_test_${randomBytes(6).toString('hex')}`;
  const url = urlFor(name);
  const pool = new pg.Pool({ connectionString: url, max: 20 });
  pool.on('error', () => {});
  const made: Skiplock<JobMap>[] = [];
  const make = <Jobs extends JobMap>() => {
    const s = new Skiplock<Jobs>({ pool, schema: TEST_SCHEMA });
    made.push(s as unknown as Skiplock<JobMap>);
    return s;
  };
  const db: TestDatabase = {
    url,
    name,
    pool,
    skiplock: make,
    query: async (text, values) => (await pool.query(text, values)).rows,
    jobs: tableIn(TEST_SCHEMA, 'jobs'),
    archive: tableIn(TEST_SCHEMA, 'jobs_archive'),
    close: async () => {
      await Promise.all(made.map((s) => s.close()));
      await pool.end();
      if (process.env.SKIPLOCK_KEEP_DB) return;
      await onServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
  return {
    db,
    create: async (migrateIt) => {
      await onServer(`CREATE DATABASE ${name}`);
      if (migrateIt) await make().migrate();
    },
  };
}

/** Creates a fresh database and migrates it (in TEST_SCHEMA) unless told not to. */
export async function createTestDatabase(migrateIt = true): Promise<TestDatabase> {
  const { db, create } = planTestDatabase();
  await create(migrateIt);
  return db;
}

/**
 * Runs `test` on a fresh database migrated (in TEST_SCHEMA) up to just before
 * the shipped migration `name`, where it stores rows as an older release
 * would, given that migration's version; drops the database after. The
 * function files are not run (they need the newest tables), so the triggers
 * they define do not fire on those rows.
 */
export async function beforeMigration(
  name: string,
  test: (old: TestDatabase, version: number) => Promise<void>,
): Promise<void> {
  const migrations = loadMigrations();
  const target = migrations.find((m) => m.name === name);
  if (!target) throw new Error(`no shipped migration named ${name}`);
  const old = await createTestDatabase(false);
  try {
    // Without the function files: they come with the newest version, as a real upgrade's run ends.
    await migrate(
      old.pool,
      TEST_SCHEMA,
      migrations.filter((m) => m.version < target.version),
      [],
    );
    await test(old, target.version);
  } finally {
    await old.close();
  }
}

type Truthy<T> = Exclude<T, undefined | null | false | 0 | ''>;

/**
 * Waits until `check` returns a truthy value, polling every 20 ms, failing
 * after `timeoutMs` with what it was waiting for, the last value `check`
 * returned (or threw) and, when given, what `seen` reports then. Keep the
 * deadline well below the test's timeout, so this message is what a failure shows.
 */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  timeoutMs = 10_000,
  what = 'condition',
  seen?: () => unknown,
): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: { value: unknown } | { error: unknown } | undefined;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as Truthy<T>;
      last = { value };
    } catch (error) {
      last = { error };
    }
    if (Date.now() > deadline) {
      const lines = [`timed out after ${timeoutMs} ms waiting for ${what}`];
      if (last && 'error' in last) lines.push(`last error: ${String(last.error)}`);
      else if (last) lines.push(`last value: ${inspect(last.value)}`);
      if (seen) {
        const report = await Promise.resolve()
          .then(seen)
          .catch((error: unknown) => `(could not report: ${String(error)})`);
        lines.push(`seen: ${typeof report === 'string' ? report : inspect(report, { depth: 4 })}`);
      }
      throw new Error(lines.join('\n'));
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Resolves once some session of the server waits for a lock that backend
 * `pid` holds (`pg_blocking_pids`), read through `db`; throws after 30 s.
 */
export async function waitForBlockedBy(
  db: { query: (text: string, values: unknown[]) => Promise<{ rows: { n: number }[] }> },
  pid: number,
  what: string,
): Promise<void> {
  await waitFor(
    async () =>
      (
        await db.query(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))',
          [pid],
        )
      ).rows[0]!.n > 0,
    30_000,
    what,
  );
}
