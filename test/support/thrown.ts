/**
 * Runs one job per entry of `thrown` on a worker whose handler throws that
 * value, and reads back what each job recorded. The worker is returned still
 * running, so a test can show it keeps going; the fixture stops it.
 */
import type { Worker } from '../../src/index.js';
import { waitFor } from './database.js';
import type { TestContext } from './fixture.js';

/** What a job recorded after its handler threw. */
export interface RecordedFailure {
  last_error: string;
  status: string;
  attempts: number;
}

export async function recordThrown(
  t: TestContext,
  queue: string,
  thrown: Record<string, unknown>,
): Promise<{ worker: Worker; byKey: Record<string, RecordedFailure> }> {
  const worker = t.worker({
    pollIntervalMs: 100,
    queues: [queue],
    handlers: {
      throws: (job) => {
        throw thrown[(job.payload as { key: string }).key];
      },
    },
  });
  await worker.start();
  const jobs = await t.skiplock.enqueueMany(
    Object.keys(thrown).map((key) => ({ kind: 'throws', payload: { key }, queue })),
  );
  const ids = jobs.map((j) => j.id);
  const recorded = () =>
    t.query<RecordedFailure & { key: string }>(
      `SELECT payload->>'key' AS key, last_error, status, attempts FROM ${t.jobs}
       WHERE id = ANY($1::bigint[]) AND last_error IS NOT NULL`,
      [ids],
    );
  const rows = await waitFor(
    async () => {
      const rows = await recorded();
      return rows.length === ids.length ? rows : undefined;
    },
    10_000,
    `${ids.length} recorded failures`,
    recorded,
  );
  return { worker, byKey: Object.fromEntries(rows.map(({ key, ...failure }) => [key, failure])) };
}
