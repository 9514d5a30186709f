/**
 * A deaf LISTEN socket: a proxy between a worker process and PostgreSQL
 * removes every notification the server sends, while every query still
 * answers (as a LISTEN through a transaction pooler, or a connection whose
 * notifications are lost, leaves it). The worker notices it does not hear its
 * own probes and says so, and its safety-net poll still runs every new job
 * within the poll interval; no job is lost.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../support/database.js';
import { startNetProxy } from '../support/net-proxy.js';
import {
  expectEveryJobDone,
  startWorker,
  tallyFigure,
  useChaosDatabase,
  workerConfig,
} from './support/cluster.js';

const t = useChaosDatabase();

const POLL_INTERVAL_MS = 1500;
/** Room for a loaded 2-core machine beyond the poll interval: the claim, the handler, the result. */
const LOAD_MARGIN_MS = 3000;

async function status(id: string): Promise<string | undefined> {
  return (await t.row(id))?.status;
}

describe('chaos: deaf LISTEN socket', () => {
  it('a worker whose LISTEN connection hears nothing runs new jobs within the poll interval and loses none', async () => {
    const url = new URL(t.url);
    const proxy = await startNetProxy(
      { host: url.hostname, port: Number(url.port || 5432) },
      { dropNotifications: true },
    );
    t.defer(() => proxy.close());
    const worker = await startWorker(
      t,
      workerConfig(
        { url: proxy.url(t.url), schema: t.schema },
        { concurrency: 4, pollIntervalMs: POLL_INTERVAL_MS, listenProbeIntervalMs: 1000 },
      ),
    );
    // The worker finds out by itself: its probe never comes back.
    const warning = await worker.next(
      'warning',
      (m) => m.message.includes('did not hear its own probe'),
      30_000,
    );
    expect(warning.message).toContain(`polling every ${POLL_INTERVAL_MS} ms`);

    // A backlog drains through the poll alone.
    const jobs = Array.from({ length: 300 }, (_, n) => ({ kind: 'effect', payload: { n } }));
    const ids = (await t.skiplock.enqueueMany(jobs)).map((j) => j.id);
    await t.settle(ids, 60_000);

    // New jobs, one at a time on an idle worker: each waits for at most one poll.
    let slowestMs = 0;
    for (let i = 0; i < 3; i++) {
      const enqueued = Date.now();
      const job = await t.skiplock.enqueue('effect', { probe: i });
      await waitFor(
        async () => (await status(job.id)) === 'succeeded',
        POLL_INTERVAL_MS + LOAD_MARGIN_MS,
        `probe ${i} to run within the poll interval`,
        () => status(job.id),
      );
      ids.push(job.id);
      slowestMs = Math.max(slowestMs, Date.now() - enqueued);
    }
    const counted = await t.tally(ids);
    tallyFigure('deaf-listen', counted, {
      kills: 0,
      restarts: 0,
      droppedNotifications: proxy.droppedNotifications,
      listens: worker.reported('listen').length,
      slowestProbeMs: slowestMs,
      pollIntervalMs: POLL_INTERVAL_MS,
    });
    expectEveryJobDone(counted);
    expect(counted.duplicates).toBe(0);
    // The wake-ups were sent, and removed on their way: only the poll can have run the jobs.
    expect(proxy.droppedNotifications).toBeGreaterThan(0);
    expect(worker.errors).toEqual([]);
    await worker.shutdown();
    expect(worker.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
