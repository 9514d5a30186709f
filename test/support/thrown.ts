/**
 * Runs one job per entry of `thrown` on a worker whose handler throws that
 * value, and reads back what each job recorded. The worker is returned still
 * running, so a test can show it keeps going; the caller stops it.
 */
import type { Skiplock, Worker } from '../../src/index.js';
import { type TestDatabase, waitFor } from './database.js';

/** What a job recorded after its handler threw. */
export interface RecordedFailure {
  last_error: string;
  status: string;
  attempts: number;
}

export async function recordThrown(
  skiplock: Skiplock,
  db: TestDatabase,
  queue: string,
  thrown: Record<string, unknown>,
): Promise<{ worker: Worker; byKey: Record<string, RecordedFailure> }> {
  const worker = skiplock.worker({
    handleSignals: false,
    pollIntervalMs: 100,
    queues: [queue],
    handlers: {
      throws: (job) => {
        throw thrown[(job.payload as { key: string }).key];
      },
    },
  });
  await worker.start();
  const jobs = await skiplock.enqueueMany(
    Object.keys(thrown).map((key) => ({ kind: 'throws', payload: { key }, queue })),
  );
  const ids = jobs.map((j) => j.id);
  const rows = await waitFor(async () => {
    const recorded = await db.query<RecordedFailure & { key: string }>(
      `SELECT payload->>'key' AS key, last_error, status, attempts FROM ${db.jobs}
       WHERE id = ANY($1::bigint[]) AND last_error IS NOT NULL`,
      [ids],
    );
    return recorded.length === ids.length ? recorded : undefined;
  });
  return { worker, byKey: Object.fromEntries(rows.map(({ key, ...failure }) => [key, failure])) };
}
