/**
 * Half-open network partition of one worker: a proxy between one worker
 * process and PostgreSQL stops forwarding (sockets open, no bytes through, no
 * FIN or RST) for longer than the visibility timeout, then heals. The
 * partitioned worker's jobs are reclaimed by another worker; its late results,
 * delivered when the partition heals, change nothing; and it claims again by
 * itself. A worker stopped while partitioned stops within its bound.
 */
import { describe, expect, it } from 'vitest';
import { type NetProxy, startNetProxy } from '../support/net-proxy.js';
import {
  figure,
  startWorker,
  useChaosDatabase,
  type WorkerProcess,
  workerConfig,
} from './support/cluster.js';
import { partitionAndHeal } from './support/partition.js';
import type { WorkerProcessConfig } from './support/protocol.js';

const t = useChaosDatabase();

const VISIBILITY_TIMEOUT_MS = 3000;
const SHUTDOWN_TIMEOUT_MS = 2000;
/** What README promises `stop()` takes beyond `shutdownTimeoutMs` when the database does not answer. */
const STOP_GRACE_MS = 3000;
/** Room for a loaded 2-core machine: the process's own exit after its worker stopped. */
const PROCESS_EXIT_MS = 2000;

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

describe('chaos: half-open partition of one worker', () => {
  it('its jobs are reclaimed by another worker, its late results change nothing, and it claims again after the heal', async () => {
    const queue = 'partition';
    const proxy = await proxyToSuiteServer();
    const cut = await behind(proxy, { queues: [queue], concurrency: 2 });
    const figures = await partitionAndHeal(t, {
      queue,
      cut,
      startOther: () =>
        startWorker(
          t,
          workerConfig(t, { queues: [queue], concurrency: 2, visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS }),
        ),
      partition: () => proxy.partition(),
      heal: () => proxy.heal(),
      visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS,
    });
    figure('half-open-partition', { kills: 0, restarts: 0, ...figures, proxiedConnections: proxy.accepted });
    await cut.shutdown();
    expect(cut.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });

  // The bound alone, so that it shows on its own when it breaks: every step of stop(), giving
  // held jobs back included, is bounded by the remaining grace, not by statementTimeoutMs.
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
    const stopMs = Date.now() - stopping;
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
