/**
 * A grouped queue's drain next to an ungrouped one's: enqueues 20,000 jobs
 * over 1,000 group keys (20 each) with one enqueueMany, then drains them with
 * one worker (concurrency 10), on a fresh database of the server at
 * BENCH_DATABASE_URL (default: local PostgreSQL). Prints one JSON line per
 * mode, times in milliseconds:
 *
 * - `ungrouped`: the queue has no limit (the ordinary claim);
 * - `limited`: a queue concurrency limit of 10 (the limited claim, no groups);
 * - `grouped`: groupConcurrency 1 (the grouped claim).
 *
 *   node --import tsx bench/group-drain.ts [--keys N] [--jobs N]
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Skiplock } from '../src/index.js';

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  return at < 0 ? fallback : Number(process.argv[at + 1]);
}

const JOBS = flag('--jobs', 20_000);
const KEYS = flag('--keys', 1000);
const adminUrl = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function run(mode: 'ungrouped' | 'limited' | 'grouped'): Promise<void> {
  const database = `skiplock_group_drain_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 10 });
  // DROP DATABASE … WITH (FORCE) ends idle connections.
  pool.on('error', () => {});
  const skiplock = new Skiplock({ pool });
  try {
    await skiplock.migrate();
    if (mode === 'limited') await skiplock.setQueueLimits('default', { concurrency: 10 });
    if (mode === 'grouped') await skiplock.setQueueLimits('default', { groupConcurrency: 1 });
    const items = Array.from({ length: JOBS }, (_, i) => ({
      kind: 'noop',
      payload: { i },
      groupKey: `tenant-${i % KEYS}`,
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
    console.log(
      JSON.stringify({
        mode,
        jobs: JOBS,
        keys: KEYS,
        enqueueMs: Math.round(enqueueMs),
        drainMs: Math.round(drainMs),
      }),
    );
  } finally {
    await skiplock.close();
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  }
}

const only = process.argv.find((a) => a.startsWith('--mode='))?.slice('--mode='.length);
for (const mode of ['ungrouped', 'limited', 'grouped'] as const) if (!only || only === mode) await run(mode);
