/**
 * skiplock with its default worker settings (only `concurrency` varies, and
 * `prefetch`/`batchSize` in the drain scenario's rows marked as tuned).
 * `SKIPLOCK_BENCH_SRC` points the adapter at another copy of the engine's
 * `src/index.ts`, to compare an engine change against this tree in one run.
 */
import { dirname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as StatementsModule from '../../src/db/queries/jobs.js';
import type * as SkiplockModule from '../../src/index.js';
import { createDatabase, dropDatabase, relationStats, withDatabase } from '../database.js';
import type { BenchPayload, BenchSystem, SystemClient, Target } from './system.js';

type Engine = typeof SkiplockModule;
type Statements = typeof StatementsModule;

/**
 * The engine's own statements (its `JobQueries`), from the same tree as
 * {@link loadEngine}: the bare-SQL rows run exactly what the worker sends.
 */
export async function loadStatements(): Promise<Statements> {
  const override = process.env.SKIPLOCK_BENCH_SRC;
  if (override) {
    const jobs = resolve(dirname(resolve(override)), 'db/queries/jobs.ts');
    return (await import(pathToFileURL(jobs).href)) as Statements;
  }
  return import('../../src/db/queries/jobs.js');
}

/** The engine under test: this tree's, or the copy named by `SKIPLOCK_BENCH_SRC`. */
export async function loadEngine(): Promise<Engine> {
  const override = process.env.SKIPLOCK_BENCH_SRC;
  if (override) return (await import(pathToFileURL(resolve(override)).href)) as Engine;
  return import('../../src/index.js');
}

type Jobs = { noop: BenchPayload };

export const skiplockSystem: BenchSystem = {
  name: 'skiplock',
  postgres: true,
  settings:
    'defaults (concurrency as given, prefetch the larger of 4 × concurrency and 500 while a backlog waits, capped by recent run times, batchSize concurrency + prefetch, pollIntervalMs 2000, onSuccess delete); pool max 10',
  available: async () => true,

  async create(serverUrl, namespace) {
    const databaseUrl = await createDatabase(serverUrl, namespace);
    const { Skiplock } = await loadEngine();
    const skiplock = new Skiplock({ connectionString: databaseUrl });
    await skiplock.migrate();
    await skiplock.close();
    return { system: 'skiplock', databaseUrl, namespace };
  },

  async attach(target: Target): Promise<SystemClient> {
    const { Skiplock } = await loadEngine();
    const skiplock = new Skiplock<Jobs>({ connectionString: target.databaseUrl });
    return {
      async enqueueOne(payload) {
        await skiplock.enqueue('noop', payload);
      },
      async enqueueMany(payloads) {
        await skiplock.enqueueMany(payloads.map((payload) => ({ kind: 'noop' as const, payload })));
      },
      async startWorker(spec) {
        const worker = skiplock.worker({
          concurrency: spec.concurrency,
          ...spec.tuning,
          handleSignals: false,
          handlers: { noop: (job) => spec.handler(job.payload) },
        });
        worker.on('error', (error, source) => console.error(`skiplock ${source}: ${error.message}`));
        await worker.start();
        return { stop: () => worker.stop() };
      },
      async purge() {
        await skiplock.pool.query('TRUNCATE skiplock.jobs');
      },
      async remaining() {
        // Two counts, each through a partial index: an OR of the two reads the
        // whole table, which beside a million kept rows slowed the drain it watched.
        const { rows } = await skiplock.pool.query<{ n: number }>(
          `SELECT ((SELECT count(*) FROM skiplock.jobs WHERE status = 'running' AND locked_at IS NOT NULL)
                 + (SELECT count(*) FROM skiplock.jobs WHERE status = 'queued' AND run_at <= now()))::int AS n`,
        );
        return rows[0]!.n;
      },
      tableStats: () => relationStats(target.databaseUrl, 'skiplock.jobs'),
      close: () => skiplock.close(),
    };
  },

  destroy: (target) => dropDatabase(withDatabase(target.databaseUrl, 'postgres'), target.namespace),
};
