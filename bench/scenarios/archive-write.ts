/**
 * The archive's write rate, for scenario 9: a worker (1 × 50, in this
 * process) completes queued jobs with `onSuccess: 'archive'`, each job moved
 * into the archive by its completion statement; jobs/s from the start until
 * none is left. Each job carries a tag and a payload field, so the archive's
 * search indexes (when present) get an entry per job.
 */
import { loadEngine } from '../systems/skiplock.js';
import { waitFor } from './scenario.js';

const DRAIN_TIMEOUT_MS = 300_000;
const ENQUEUE_CHUNK = 5_000;

/**
 * Enqueues `jobs` jobs on the database at `databaseUrl`, archives them with a
 * worker, and returns jobs/s.
 *
 * @throws {Error} when jobs are left after the timeout.
 */
export async function archiveDrain(databaseUrl: string, jobs: number): Promise<number> {
  const { Skiplock } = await loadEngine();
  const skiplock = new Skiplock<{ noop: { i: number; customer: string } }>({ connectionString: databaseUrl });
  try {
    for (let from = 0; from < jobs; from += ENQUEUE_CHUNK) {
      await skiplock.enqueueMany(
        Array.from({ length: Math.min(ENQUEUE_CHUNK, jobs - from) }, (_, k) => ({
          kind: 'noop' as const,
          payload: { i: from + k, customer: `c${(from + k) % 1000}` },
          tags: [`tenant:${(from + k) % 100}`],
        })),
      );
    }
    const worker = skiplock.worker({
      concurrency: 50,
      onSuccess: 'archive',
      handleSignals: false,
      handlers: { noop: () => undefined },
    });
    worker.on('error', (error, source) => console.error(`skiplock ${source}: ${error.message}`));
    const startedAt = performance.now();
    await worker.start();
    const left = async () =>
      (
        await skiplock.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status IN ('queued', 'running')`,
        )
      ).rows[0]!.n;
    const done = await waitFor(async () => (await left()) === 0, DRAIN_TIMEOUT_MS, 20);
    const seconds = (performance.now() - startedAt) / 1000;
    await worker.stop();
    if (!done) throw new Error(`archive drain: jobs left after ${DRAIN_TIMEOUT_MS} ms`);
    return jobs / seconds;
  } finally {
    await skiplock.close();
  }
}
