/**
 * The setup of a dashboard test file that reads pages through Hono's
 * `app.request()`: the file's database (useFileDatabase) and `get`, which asks
 * a fresh dashboard on it (no auto-refresh) for one path.
 */
import { createDashboard } from '../../../src/dashboard/index.js';
import { type FileDatabase, useFileDatabase } from '../../support/file-database.js';

/** What a dashboard request test works with. */
export interface DashboardRequests extends FileDatabase {
  /** The status and body of `path` (query string included) on a dashboard of the file's database. */
  get(path: string): Promise<{ status: number; body: string }>;
}

/** Registers the file's database hooks; register the file's own after it. */
export function useDashboardRequests(): DashboardRequests {
  const { db, skiplock } = useFileDatabase();
  return {
    db,
    skiplock,
    get: async (path) => {
      const res = await createDashboard(skiplock, { refreshIntervalMs: 0 }).request(path);
      return { status: res.status, body: await res.text() };
    },
  };
}
