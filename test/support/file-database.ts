/**
 * One database for a whole test file, in TEST_SCHEMA: `useFileDatabase()` at
 * the top of a file creates (and migrates) it before the file's first test and
 * drops it after its last. Its handles exist from the start (nothing connects
 * before the database does), so the file keeps them in constants. For a
 * schema per test, use `useTestDatabase()` (fixture.ts) instead.
 */
import { afterAll, beforeAll } from 'vitest';
import type { JobMap, Skiplock } from '../../src/index.js';
import { planTestDatabase, type TestDatabase } from './database.js';

/** The file's database and a Skiplock on it. */
export interface FileDatabase<Jobs extends JobMap = JobMap> {
  db: TestDatabase;
  skiplock: Skiplock<Jobs>;
}

/**
 * Registers the hooks that create and drop the file's database; register the
 * file's own hooks after it, so they run once the database is there.
 *
 * @param options.migrate - migrate the database in TEST_SCHEMA (default true).
 */
export function useFileDatabase<Jobs extends JobMap = JobMap>(
  options: { migrate?: boolean } = {},
): FileDatabase<Jobs> {
  const { db, create } = planTestDatabase();
  beforeAll(async () => {
    await create(options.migrate !== false);
  });
  afterAll(async () => {
    await db.close();
  });
  return { db, skiplock: db.skiplock<Jobs>() };
}
