/**
 * The test fixture: `useTestDatabase()` at the top of a file gives it a
 * database of its own (made before its first test, dropped after its last)
 * and each test a freshly migrated schema of its own, so no test sees — or
 * sweeps — another test's rows. Every worker a test makes through it is
 * stopped after the test, passed or failed, and its cleanups run.
 */
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { type JobMap, Skiplock, type Worker, type WorkerOptions } from '../../src/index.js';
import { countRows, createTestDatabase, TEST_SCHEMA, type TestDatabase, tableIn } from './database.js';

/** A test's view of its database. Read its fields inside a test or hook only. */
export interface TestContext {
  /** The file's database (shared by the file's tests; each has its own schema). */
  readonly db: TestDatabase;
  /** The file's database URL. */
  readonly url: string;
  /** This test's schema (unquoted): TEST_SCHEMA with a per-test suffix, so odd names stay odd. */
  readonly schema: string;
  /** A Skiplock on this test's schema (migrated unless `migrate: false`). */
  readonly skiplock: Skiplock;
  /** This test's jobs table, quoted. */
  readonly jobs: string;
  /** This test's archive table, quoted. */
  readonly archive: string;
  /** Runs SQL on the file's database. */
  query: TestDatabase['query'];
  /**
   * Makes a worker on this test's schema; it is stopped after the test.
   * Unless given: `handleSignals: false`, and a `shutdownTimeoutMs` of
   * {@link TEST_SHUTDOWN_TIMEOUT_MS}, so a test that fails while a handler
   * hangs does not wait out the 30 s default.
   */
  worker(options: WorkerOptions<JobMap>): Worker;
  /** Stops `worker` after the test, like the ones made by `worker()`. */
  track(worker: Worker): Worker;
  /** Runs `cleanup` after the test (after the workers stopped; the last registered first). */
  defer(cleanup: () => unknown): void;
  /** Jobs in this test's schema, optionally filtered by a WHERE clause on parameters. */
  jobCount(where?: string, values?: unknown[]): Promise<number>;
  /** One job's row: status, attempts, locked_by, last_error. */
  row(id: string): Promise<JobRow | undefined>;
}

/** The columns `row()` reads. */
export interface JobRow {
  status: string;
  attempts: number;
  locked_by: string | null;
  last_error: string | null;
}

/** The shutdown timeout of the fixture's workers unless a test gives one. */
export const TEST_SHUTDOWN_TIMEOUT_MS = 2000;

/** How long the fixture lets a worker take to stop beyond its shutdown timeout before it reports it. */
const STOP_GRACE_MS = 15_000;

let schemas = 0;

/** Registers the hooks of the fixture and returns the context they fill. */
export function useTestDatabase(options: { migrate?: boolean } = {}): TestContext {
  let db: TestDatabase | undefined;
  let current: { schema: string; skiplock: Skiplock } | undefined;
  const workers: Worker[] = [];
  const cleanups: (() => unknown)[] = [];

  const need = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`${what} is only there inside a test`);
    return value;
  };
  const test = () => need(current, 'the test schema');
  const file = () => need(db, 'the test database');

  beforeAll(async () => {
    db = await createTestDatabase(false);
  });
  beforeEach(async () => {
    const schema = `${TEST_SCHEMA}_${++schemas}`;
    const skiplock = new Skiplock({ pool: file().pool, schema });
    if (options.migrate !== false) await skiplock.migrate();
    current = { schema, skiplock };
  });
  afterEach(async () => {
    const stopping = workers
      .splice(0)
      .map((worker) => stopWithin(worker, worker.options.shutdownTimeoutMs + STOP_GRACE_MS));
    const stopped = await Promise.allSettled(stopping);
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    await current?.skiplock.close();
    current = undefined;
    const failed = stopped.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed.length > 0) throw failed[0]!.reason;
  });
  afterAll(async () => {
    await db?.close();
  });

  const context: TestContext = {
    get db() {
      return file();
    },
    get url() {
      return file().url;
    },
    get schema() {
      return test().schema;
    },
    get skiplock() {
      return test().skiplock;
    },
    get jobs() {
      return tableIn(test().schema, 'jobs');
    },
    get archive() {
      return tableIn(test().schema, 'jobs_archive');
    },
    query: (text, values) => file().query(text, values),
    worker: (workerOptions) =>
      context.track(
        test().skiplock.worker({
          handleSignals: false,
          shutdownTimeoutMs: TEST_SHUTDOWN_TIMEOUT_MS,
          ...workerOptions,
        }),
      ),
    track: (worker) => {
      workers.push(worker);
      return worker;
    },
    defer: (cleanup) => {
      cleanups.push(cleanup);
    },
    jobCount: (where, values) => countRows(file().pool, context.jobs, where, values),
    row: async (id) => {
      const [row] = await file().query<JobRow>(
        `SELECT status, attempts, locked_by, last_error FROM ${context.jobs} WHERE id = $1`,
        [id],
      );
      return row;
    },
  };
  return context;
}

/** Stops a worker, or fails naming it when it has not stopped within `deadlineMs`. */
async function stopWithin(worker: Worker, deadlineMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`worker ${worker.id} did not stop within ${deadlineMs} ms after the test`)),
      deadlineMs,
    );
  });
  try {
    await Promise.race([worker.stop(), late]);
  } finally {
    clearTimeout(timer);
  }
}
