/**
 * A quick check that the hot path did not slow: enqueues 20,000 jobs with one
 * enqueueMany, then drains them with one worker (concurrency 10), on a fresh
 * database of the server at BENCH_DATABASE_URL (default: local PostgreSQL).
 * Prints one JSON line: enqueue and drain times in milliseconds. With
 * `--unique`, every job also carries a distinct unique key. With `--one`, it
 * also times 2,000 enqueues one by one (after the drain, on an empty table).
 *
 *   node --import tsx bench/hot-path.ts [--unique] [--one]
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Skiplock } from '../src/index.js';

const JOBS = 20_000;
const adminUrl = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const unique = process.argv.includes('--unique');
const database = `skiplock_hot_path_${randomBytes(4).toString('hex')}`;

const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${database}`);
const url = new URL(adminUrl);
url.pathname = `/${database}`;
const pool = new pg.Pool({ connectionString: url.toString(), max: 10 });
// The forced drop at the end can reach a connection that is still closing.
pool.on('error', () => {});
const skiplock = new Skiplock({ pool });
try {
  await skiplock.migrate();
  const items = Array.from({ length: JOBS }, (_, i) => ({
    kind: 'noop',
    payload: { i },
    ...(unique ? { uniqueKey: `k${i}` } : {}),
  }));
  let started = performance.now();
  await skiplock.enqueueMany(items);
  const enqueueMs = performance.now() - started;

  let done = 0;
  let finish: () => void = () => {};
  const drained = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const worker = skiplock.worker({
    concurrency: 10,
    handleSignals: false,
    handlers: {
      noop: async () => {
        if (++done === JOBS) finish();
      },
    },
  });
  started = performance.now();
  await worker.start();
  await drained;
  await worker.stop();
  const drainMs = performance.now() - started;
  let oneByOneMs: number | undefined;
  if (process.argv.includes('--one')) {
    started = performance.now();
    for (let i = 0; i < 2000; i++)
      await skiplock.enqueue('noop', { i }, unique ? { uniqueKey: `one${i}` } : {});
    oneByOneMs = Math.round(performance.now() - started);
  }
  console.log(
    JSON.stringify({
      jobs: JOBS,
      unique,
      enqueueMs: Math.round(enqueueMs),
      drainMs: Math.round(drainMs),
      oneByOneMs,
    }),
  );
} finally {
  await skiplock.close();
  await pool.end();
  await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  await admin.end();
}
