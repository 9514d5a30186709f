/**
 * pg-boss 12 with the settings its docs give for throughput: LISTEN/NOTIFY
 * wake-ups (`useListenNotify`, queue `notify`), batch fetches with
 * `burstWhenBatchFull`, several fetch loops (`localConcurrency`), and no
 * supervision or cron in the benchmark process.
 */
import { PgBoss } from 'pg-boss';
import { createDatabase, dropDatabase, relationStats, withDatabase } from '../database.js';
import type { BenchPayload, BenchSystem, SystemClient, Target } from './system.js';

/** Jobs per fetch; `localConcurrency` fetch loops make up the concurrency. */
const BATCH_SIZE = 10;

function boss(databaseUrl: string): PgBoss {
  return new PgBoss({
    connectionString: databaseUrl,
    max: 10,
    useListenNotify: true,
    schedule: false,
    supervise: false,
  });
}

export const pgBossSystem: BenchSystem = {
  name: 'pg-boss',
  postgres: true,
  settings: `useListenNotify + queue notify, batchSize ${BATCH_SIZE} × localConcurrency concurrency/${BATCH_SIZE}, burstWhenBatchFull, pollingIntervalSeconds 0.5, max 10`,
  available: async () => true,

  async create(serverUrl, namespace) {
    const databaseUrl = await createDatabase(serverUrl, namespace);
    const b = new PgBoss({ connectionString: databaseUrl, max: 2, schedule: false, supervise: false });
    b.on('error', () => {});
    await b.start();
    await b.createQueue('bench', { notify: true });
    await b.stop({ graceful: false });
    return { system: 'pg-boss', databaseUrl, namespace };
  },

  async attach(target: Target): Promise<SystemClient> {
    const b = boss(target.databaseUrl);
    b.on('error', (error) => console.error(`pg-boss: ${error.message}`));
    b.on('warning', () => {});
    await b.start();
    return {
      async enqueueOne(payload) {
        await b.send('bench', payload);
      },
      async enqueueMany(payloads) {
        await b.insert(
          'bench',
          payloads.map((data) => ({ data })),
        );
      },
      async startWorker(spec) {
        const batchSize = Math.min(BATCH_SIZE, spec.concurrency);
        await b.work<BenchPayload>(
          'bench',
          {
            batchSize,
            localConcurrency: Math.max(1, Math.round(spec.concurrency / batchSize)),
            pollingIntervalSeconds: 0.5,
            burstWhenBatchFull: true,
          },
          async (jobs) => {
            await Promise.all(jobs.map((job) => spec.handler(job.data)));
          },
        );
        return { stop: () => b.offWork('bench', { wait: true }) };
      },
      async purge() {
        await b.deleteAllJobs('bench');
      },
      async remaining() {
        const rows = await b
          .getDb()
          .executeSql(
            "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'bench' AND state IN ('created', 'retry', 'active')",
          );
        return (rows.rows[0] as { n: number }).n;
      },
      tableStats: () => relationStats(target.databaseUrl, 'pgboss.job'),
      close: () => b.stop({ graceful: false }),
    };
  },

  destroy: (target) => dropDatabase(withDatabase(target.databaseUrl, 'postgres'), target.namespace),
};
