/**
 * Half-open network partition of one worker: a proxy between one worker
 * process and PostgreSQL stops forwarding (sockets open, no bytes through, no
 * FIN or RST) for longer than the visibility timeout, then heals. The
 * partitioned worker's jobs are reclaimed by another worker; its late results,
 * delivered when the partition heals, change nothing; and it claims again by
 * itself. A worker stopped while partitioned stops within its bound.
 */
import { describe, expect, it } from 'vitest';
import {
  figure,
  startWorker,
  tally,
  useChaosDatabase,
  type WorkerProcess,
  workerConfig,
} from './support/cluster.js';
import { type NetProxy, startNetProxy } from './support/net-proxy.js';
import type { WorkerProcessConfig } from './support/protocol.js';

const t = useChaosDatabase();

const VISIBILITY_TIMEOUT_MS = 3000;
const SHUTDOWN_TIMEOUT_MS = 2000;
/** What README promises `stop()` takes beyond `shutdownTimeoutMs` when the database does not answer. */
const STOP_GRACE_MS = 3000;
/** Room for a loaded 2-core machine: the process's own exit after its worker stopped. */
const PROCESS_EXIT_MS = 1000;

/** A proxy to the suite's server, closed after the test (after the processes stopped). */
async function proxyToSuiteServer(): Promise<NetProxy> {
  const url = new URL(t.url);
  const proxy = await startNetProxy({ host: url.hostname, port: Number(url.port || 5432) });
  t.defer(() => proxy.close());
  return proxy;
}

/** A worker process whose every connection goes through `proxy`. */
function behind(proxy: NetProxy, overrides: Partial<WorkerProcessConfig>): Promise<WorkerProcess> {
  return startWorker(
    t,
    workerConfig(
      { url: proxy.url(t.url), schema: t.schema },
      { visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS, shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS, ...overrides },
    ),
  );
}

/** The jobs' whole rows, as JSON, in id order. */
async function rows(ids: string[]): Promise<Record<string, unknown>[]> {
  const found = await t.query<{ row: Record<string, unknown> }>(
    `SELECT to_jsonb(j) AS row FROM ${t.jobs} j WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
  return found.map((r) => r.row);
}

describe('chaos: half-open partition of one worker', () => {
  it('its jobs are reclaimed by another worker, its late results change nothing, and it claims again after the heal', async () => {
    const queue = 'partition';
    const proxy = await proxyToSuiteServer();
    const cut = await behind(proxy, { queues: [queue], concurrency: 2 });
    const x = await t.skiplock.enqueue('block', {}, { queue });
    const y = await t.skiplock.enqueue('block', {}, { queue });
    const ids = [x.id, y.id];
    for (const id of ids) await cut.next('started', (m) => m.id === id && m.attempts === 1);

    proxy.partition();
    const partitionedAt = Date.now();
    // Started only now, so that only a reclaim can give it the partitioned worker's jobs.
    const other = await startWorker(
      t,
      workerConfig(t, { queues: [queue], concurrency: 2, visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS }),
    );
    for (const id of ids) await other.next('started', (m) => m.id === id && m.attempts === 2, 30_000);
    const reclaimedMs = Date.now() - partitionedAt;
    expect(reclaimedMs).toBeGreaterThanOrEqual(VISIBILITY_TIMEOUT_MS);
    const second = await rows(ids);
    expect(second.map((r) => [r.status, r.attempts, r.locked_by, r.last_error])).toEqual([
      ['running', 2, other.workerId, 'reclaimed: visibility timeout'],
      ['running', 2, other.workerId, 'reclaimed: visibility timeout'],
    ]);

    // The partitioned worker's handlers end now: their results wait in the partition.
    cut.send({ type: 'finish', id: x.id, outcome: 'ok' });
    cut.send({ type: 'finish', id: y.id, outcome: 'permanent' });
    for (const id of ids) await cut.next('finishing', (m) => m.id === id);
    proxy.heal();
    const partitionMs = Date.now() - partitionedAt;
    for (const id of ids) await cut.next('job:stale', (m) => m.id === id && m.attempts === 1, 30_000);
    // The late success did not end x, the late permanent failure did not fail y: not one column moved.
    expect(await rows(ids)).toEqual(second);
    expect(cut.reported('job:success')).toEqual([]);
    expect(cut.reported('job:failure')).toEqual([]);

    for (const id of ids) other.send({ type: 'finish', id, outcome: 'ok' });
    for (const id of ids) await other.next('job:success', (m) => m.id === id && m.attempts === 2);
    const final = await rows(ids);
    expect(final.map((r) => [r.status, r.attempts, r.locked_by, r.last_error])).toEqual([
      ['succeeded', 2, null, 'reclaimed: visibility timeout'],
      ['succeeded', 2, null, 'reclaimed: visibility timeout'],
    ]);
    const counted = await tally(t.db.pool, t.schema, ids);
    expect(counted).toMatchObject({ effects: 2, duplicates: 2, lost: 0, sameAttemptTwice: 0 });

    // Alone again, the healed worker claims and finishes a new job by itself.
    await other.shutdown();
    const z = await t.skiplock.enqueue('block', {}, { queue });
    await cut.next('started', (m) => m.id === z.id && m.attempts === 1, 30_000);
    cut.send({ type: 'finish', id: z.id, outcome: 'ok' });
    await cut.next('job:success', (m) => m.id === z.id && m.attempts === 1);
    expect(await t.row(z.id)).toEqual({
      status: 'succeeded',
      attempts: 1,
      locked_by: null,
      last_error: null,
    });
    figure('half-open-partition', {
      jobs: 3,
      kills: 0,
      restarts: 0,
      effects: counted.effects + 1,
      duplicates: counted.duplicates,
      lost: counted.lost,
      partitionMs,
      reclaimedMs,
      stale: cut.reported('job:stale').length,
      leaseLostByHeartbeat: cut.reported('lease:lost').length,
      proxiedConnections: proxy.accepted,
    });
    expect(cut.alive).toBe(true);
    await cut.shutdown();
    expect(cut.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });

  // The bound alone, so that it shows on its own when it breaks.
  // TODO(lead): fails until stop() bounds giving held jobs back by the remaining grace: today the
  // release waits for statementTimeoutMs (30 s by default), so stop() takes about
  // shutdownTimeoutMs + statementTimeoutMs during a half-open partition.
  it('a worker stopped during the partition stops within shutdownTimeoutMs plus about 3 s', async () => {
    const queue = 'partition-stop';
    const proxy = await proxyToSuiteServer();
    const cut = await behind(proxy, { queues: [queue], concurrency: 2 });
    const jobs = [
      await t.skiplock.enqueue('block', {}, { queue }),
      await t.skiplock.enqueue('block', {}, { queue }),
    ];
    for (const job of jobs) await cut.next('started', (m) => m.id === job.id);

    proxy.partition();
    const bound = SHUTDOWN_TIMEOUT_MS + STOP_GRACE_MS + PROCESS_EXIT_MS;
    const stopping = Date.now();
    cut.kill('SIGTERM');
    // Waits no longer than the bound (plus a little, to measure a near miss); the cleanup kills a late process.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([cut.exited, new Promise((resolve) => (timer = setTimeout(resolve, bound + 2000)))]);
    clearTimeout(timer);
    const stopMs = cut.alive ? Number.NaN : Date.now() - stopping;
    figure('half-open-partition-stop', {
      jobs: jobs.length,
      kills: 0,
      restarts: 0,
      effects: 0,
      duplicates: 0,
      lost: 0,
      stopMs: cut.alive ? `>${bound + 2000}` : stopMs,
      boundMs: bound,
    });
    expect(cut.alive, `the partitioned worker still runs ${bound + 2000} ms after SIGTERM`).toBe(false);
    expect(stopMs).toBeLessThanOrEqual(bound);
    expect(cut.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
