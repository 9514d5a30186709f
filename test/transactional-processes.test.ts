/**
 * Transactional handlers across real processes: a worker SIGKILLed between
 * its handler's insert and COMMIT leaves nothing behind, and the job's next
 * attempt (in another process, after the sweeper reclaims it) commits its
 * effect exactly once.
 */
import type { ChildProcess } from 'node:child_process';
import { beforeEach, describe, expect, it } from 'vitest';
import { countRows, tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { exited, forkScript, killedAfterTest, sent } from './support/processes.js';

const t = useTestDatabase();
const effects = () => tableIn(t.schema, 'txn_effects');

beforeEach(async () => {
  await t.query(
    `CREATE TABLE ${effects()} (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL)`,
  );
});

/** Starts a worker process (killed after the test whatever happened) and waits until it runs. */
async function startWorker(options: Record<string, unknown>): Promise<ChildProcess> {
  const child = killedAfterTest(
    t,
    forkScript('../processes/transactional-worker.ts', {
      SKIPLOCK_URL: t.db.url,
      SKIPLOCK_SCHEMA: t.schema,
      WORKER_OPTIONS: JSON.stringify({ queues: ['txn'], pollIntervalMs: 200, ...options }),
    }),
  );
  await sent(child, 'ready');
  return child;
}

describe('transactional handlers in real processes', () => {
  it('a worker killed between the insert and COMMIT leaves no row; the next attempt commits exactly one', async () => {
    // Short leases, so that the sweeper reclaims the dead worker's job within seconds.
    const leases = { visibilityTimeoutMs: 1500, heartbeatIntervalMs: 300, sweepIntervalMs: 250 };
    const first = await startWorker({ ...leases, onSuccess: 'keep' });
    const inserted = sent(first, 'inserted');
    const job = await t.skiplock.enqueue('txn', { park: true }, { queue: 'txn' });
    await inserted;
    // Inserted on the handler's transaction, not committed: nobody else sees it.
    expect(await countRows(t.db.pool, effects())).toBe(0);
    first.kill('SIGKILL');
    expect(await exited(first)).toBe('SIGKILL');
    // The server rolled the killed session's transaction back: still nothing, the job still running.
    expect(await countRows(t.db.pool, effects())).toBe(0);
    expect(await t.row(job.id)).toMatchObject({ status: 'running', attempts: 1 });

    // The replacement takes the job again once the sweeper reclaimed it; this attempt returns.
    await t.query(`UPDATE ${t.jobs} SET payload = '{}' WHERE id = $1`, [job.id]);
    const second = await startWorker({ ...leases, onSuccess: 'keep' });
    await waitFor(
      async () => (await t.row(job.id))?.status === 'succeeded',
      30_000,
      'the job to succeed in the second worker',
      () => t.row(job.id),
    );
    const rows = await t.query<{ job_id: string; attempts: number; pid: number }>(
      `SELECT job_id, attempts, pid FROM ${effects()}`,
    );
    expect(rows).toEqual([{ job_id: job.id, attempts: 2, pid: second.pid }]);
    expect(await t.row(job.id)).toEqual({
      status: 'succeeded',
      attempts: 2,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });
  });
});
