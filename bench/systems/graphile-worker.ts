/**
 * graphile-worker 0.18 with the settings its docs recommend for throughput:
 * a local queue (`localQueue.size` 500) and no batching delay for results
 * (`completeJobBatchDelay` / `failJobBatchDelay` 0).
 */
import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import pg from 'pg';
import { createDatabase, dropDatabase, relationStats, withDatabase } from '../database.js';
import type { BenchPayload, BenchSystem, SystemClient, Target } from './system.js';

const silent = new Logger(() => () => {});

export const graphileWorkerSystem: BenchSystem = {
  name: 'graphile-worker',
  postgres: true,
  settings: 'localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0, maxPoolSize 10',
  available: async () => true,

  async create(serverUrl, namespace) {
    const databaseUrl = await createDatabase(serverUrl, namespace);
    const utils = await makeWorkerUtils({ connectionString: databaseUrl, logger: silent });
    await utils.migrate();
    await utils.release();
    return { system: 'graphile-worker', databaseUrl, namespace };
  },

  async attach(target: Target): Promise<SystemClient> {
    const pool = new pg.Pool({ connectionString: target.databaseUrl, max: 10 });
    pool.on('error', (error) => console.error(`graphile-worker pool: ${error.message}`));
    pool.on('connect', (client) => client.on('error', () => {}));
    const utils = await makeWorkerUtils({ pgPool: pool, logger: silent });
    return {
      async enqueueOne(payload) {
        await utils.addJob('noop', payload);
      },
      async enqueueMany(payloads) {
        await utils.addJobs(payloads.map((payload) => ({ identifier: 'noop', payload })));
      },
      async startWorker(spec) {
        const runner = await run({
          pgPool: pool,
          concurrency: spec.concurrency,
          noHandleSignals: true,
          logger: silent,
          taskList: { noop: (payload) => spec.handler(payload as BenchPayload) },
          preset: {
            worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
          },
        });
        return { stop: () => runner.stop() };
      },
      async purge() {
        await pool.query('TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues');
      },
      async remaining() {
        const { rows } = await pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM graphile_worker._private_jobs',
        );
        return rows[0]!.n;
      },
      tableStats: () => relationStats(target.databaseUrl, 'graphile_worker._private_jobs'),
      async close() {
        await utils.release();
        await pool.end();
      },
    };
  },

  destroy: (target) => dropDatabase(withDatabase(target.databaseUrl, 'postgres'), target.namespace),
};
