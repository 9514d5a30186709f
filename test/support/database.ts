/**
 * Per-file isolation: each test file gets a database of its own on the suite's
 * server, migrated in the schema under test (`SKIPLOCK_TEST_SCHEMA`, default
 * `skiplock`), so files run in parallel. Set `SKIPLOCK_KEEP_DB=1` to keep the
 * databases for inspection.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { Skiplock } from '../../src/index.js';
import type { JobMap } from '../../src/job/job.js';

export const TEST_SCHEMA = process.env.SKIPLOCK_TEST_SCHEMA ?? 'skiplock';

export interface TestDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  /** A Skiplock on the file's database (migrated). */
  skiplock<Jobs extends JobMap = JobMap>(): Skiplock<Jobs>;
  /** Runs SQL on the file's database. */
  query<Row extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<Row[]>;
  /** The schema, quoted, for ad-hoc SQL in assertions. */
  jobs: string;
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

/** Creates a fresh database and migrates it. */
export async function createTestDatabase(migrateIt = true): Promise<TestDatabase> {
  const name = `skiplock_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = urlFor(name);
  const pool = new pg.Pool({ connectionString: url, max: 20 });
  pool.on('error', () => {});
  const made: Skiplock<JobMap>[] = [];
  const make = <Jobs extends JobMap>() => {
    const s = new Skiplock<Jobs>({ pool, schema: TEST_SCHEMA });
    made.push(s as unknown as Skiplock<JobMap>);
    return s;
  };
  if (migrateIt) await make().migrate();
  return {
    url,
    name,
    pool,
    skiplock: make,
    query: async (text, values) => (await pool.query(text, values)).rows,
    jobs: `"${TEST_SCHEMA.replaceAll('"', '""')}".jobs`,
    close: async () => {
      await Promise.all(made.map((s) => s.close()));
      await pool.end();
      if (process.env.SKIPLOCK_KEEP_DB) return;
      const admin = new pg.Client({ connectionString: adminUrl() });
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}

/** Waits until `check` returns a truthy value, polling every 20 ms, failing after `timeoutMs`. */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<Exclude<T, undefined | null | false | 0 | ''>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as Exclude<T, undefined | null | false | 0 | ''>;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`,
      );
    await new Promise((r) => setTimeout(r, 20));
  }
}
