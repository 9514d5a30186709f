/**
 * Failover to a synchronous streaming standby in the middle of a drain. The
 * workers, the producer and the test reach the database through one address
 * (a TCP proxy, as a virtual IP or a DNS name would be). Mid-drain the
 * primary's processes are SIGKILLed (a host crash), the standby is promoted
 * and the address repointed to it. Every job runs at least once and ends
 * succeeded (lost = 0); re-runs are allowed and counted; the recovery time is
 * printed.
 *
 * This scenario starts its own two servers, whatever `DATABASE_URL` says.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { Skiplock } from '../../src/index.js';
import { countRows, TEST_SCHEMA, tableIn, waitFor } from '../support/database.js';
import { startNetProxy } from '../support/net-proxy.js';
import {
  createEffectTables,
  effectTables,
  type Owner,
  startWorker,
  tally,
  tallyFigure,
  waitUntilSettled,
  workerConfig,
} from './support/cluster.js';
import { enqueueInBatches } from './support/enqueue-batches.js';
import { startReplicatedServers } from './support/replicated-servers.js';

/** Cleanups of the test, the last registered first, run whether it passed or failed. */
const cleanups: (() => unknown)[] = [];
const owner: Owner = { defer: (cleanup) => cleanups.push(cleanup) };
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) {
    await Promise.resolve()
      .then(cleanup)
      .catch((error: unknown) => console.error('[chaos] failover cleanup:', error));
  }
});

const JOB_COUNT = 2000;
const KILL_AFTER = 600;
const WORKER_COUNT = 3;

describe('chaos: failover to a synchronous standby', () => {
  it('a failover mid-drain behind one address loses no job', async () => {
    const servers = await startReplicatedServers();
    owner.defer(() => servers.destroy());
    const proxy = await startNetProxy({ host: '127.0.0.1', port: servers.primary.port });
    owner.defer(() => proxy.close());
    const url = proxy.url(servers.primary.url);
    const schema = TEST_SCHEMA;
    const jobs = tableIn(schema, 'jobs');
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {});
    owner.defer(() => pool.end());
    const skiplock = new Skiplock({ pool, schema });
    owner.defer(() => skiplock.close());
    await skiplock.migrate();
    await createEffectTables(pool, schema);

    const target = { url, schema };
    const workers = await Promise.all(
      Array.from({ length: WORKER_COUNT }, () =>
        startWorker(owner, workerConfig(target, { concurrency: 8 })),
      ),
    );
    const ids = await enqueueInBatches(skiplock, JOB_COUNT, (n) => ({ kind: 'effect', payload: { n } }));
    const deliveries = () => countRows(pool, effectTables(schema).deliveries);
    await waitFor(
      async () => (await deliveries()) >= KILL_AFTER,
      60_000,
      `${KILL_AFTER} deliveries`,
      deliveries,
    );
    // Commits wait for the standby: what a client saw committed is on the standby.
    const [replica] = (
      await pool.query<{ sync_state: string }>(
        'SELECT sync_state FROM pg_stat_replication WHERE application_name = $1',
        ['standby'],
      )
    ).rows;
    expect(replica?.sync_state).toBe('sync');

    const listenMarks = workers.map((w) => w.messages.length);
    await servers.killPrimary();
    const killedAt = Date.now();
    await servers.promoteStandby();
    proxy.retarget({ host: '127.0.0.1', port: servers.standby.port });
    const repointedMs = Date.now() - killedAt;
    // Recovered: the first job finished on the promoted standby (the old primary is gone, so any
    // job finished after the kill finished there).
    const firstFinish = async () =>
      (
        await pool.query<{ at: number | null }>(
          `SELECT (extract(epoch FROM min(finished_at)) * 1000)::float8 AS at FROM ${jobs}
           WHERE status = 'succeeded' AND finished_at > to_timestamp($1::float8 / 1000)`,
          [killedAt],
        )
      ).rows[0]?.at;
    const recoveredAt = await waitFor(firstFinish, 60_000, 'a job to finish on the promoted standby');
    const recoveryMs = Math.round(recoveredAt - killedAt);

    await waitUntilSettled(pool, schema, ids, 90_000);
    const settleMs = Date.now() - killedAt;
    // Each worker listens again, on the promoted standby.
    for (const [i, w] of workers.entries()) await w.next('listen', () => true, 30_000, listenMarks[i]);
    const counted = await tally(pool, schema, ids);
    const [attempts] = (
      await pool.query<{ reclaimed: number; max: number }>(
        `SELECT count(*) FILTER (WHERE attempts > 1)::int AS reclaimed, max(attempts)::int AS max
         FROM ${jobs} WHERE id = ANY($1::bigint[])`,
        [ids],
      )
    ).rows;
    const errors = workers.reduce((n, w) => n + w.errors.length, 0);
    tallyFigure('failover', counted, {
      kills: 1,
      restarts: 0,
      sameAttemptTwice: counted.sameAttemptTwice,
      reclaimed: attempts!.reclaimed,
      maxAttempts: attempts!.max,
      workerErrors: errors,
      repointedMs,
      recoveryMs,
      settleMs,
    });
    expect(counted.jobs).toBe(JOB_COUNT);
    // Every job done, none lost. Unlike a worker crash, a server crash may also lose claims: the
    // worker commits them without waiting for the WAL (nor the standby), so a claim the old primary
    // had not shipped is claimed again on the new one with the same attempt number. Such repeats
    // are at-least-once delivery as documented; they are counted, not refused.
    expect(counted).toMatchObject({
      effects: counted.jobs,
      lost: 0,
      finalAttemptMissing: 0,
      byStatus: { succeeded: counted.jobs },
    });
    // A job runs again only when an attempt of it was cut short by the failover, or its claim was lost with the old primary.
    expect(counted.duplicates).toBeLessThanOrEqual(attempts!.reclaimed + counted.sameAttemptTwice);
    // The workers saw the failover (and reported it) rather than missing it, and lived through it.
    expect(errors).toBeGreaterThan(0);
    for (const w of workers) expect(w.alive).toBe(true);
    await Promise.all(workers.map((w) => w.shutdown()));
    for (const w of workers) expect(w.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
