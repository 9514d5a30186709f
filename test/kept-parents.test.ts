/**
 * Parents kept until their children have started: a parent that succeeds
 * under 'delete' or 'archive' while a child has not started stays in the jobs
 * table, `succeeded` with its result, and the maintenance loop applies its
 * policy once every child has started. And the race of a child's enqueue with
 * its parent's finish: the child always reads the parent's status and result.
 */
import { describe, expect, it } from 'vitest';
import { JobQueries } from '../src/db/queries/jobs.js';
import type { Job, ParentJob } from '../src/index.js';
import { withMaintenanceLock } from '../src/maintenance/maintainer.js';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';

const t = useTestDatabase();

/**
 * One pass of the maintenance loop's kept-parents service, under its advisory
 * lock as the worker runs it (so no worker's pass runs at the same time).
 */
async function settlePass(): Promise<{ locked: number; settled: number; archived: number }> {
  const queries = new JobQueries(t.schema);
  return waitFor(
    async () => {
      const pass = await withMaintenanceLock(t.db.pool, t.schema, 'parents', (client) =>
        queries.dependencies.settleKeptParents(client, 1000),
      );
      return pass.locked ? pass.result : undefined;
    },
    30_000,
    'the maintenance lock',
  );
}

/** The job's row in the archive: status and result. */
async function archived(id: string) {
  return t.query<{ status: string; result: unknown }>(
    `SELECT status, result FROM ${t.archive} WHERE id = $1`,
    [id],
  );
}

/**
 * Starts a worker under `policy` that runs `charge` with `charge` and
 * records each `ship` job's parents() in the array returned.
 */
async function startWorker(policy: 'delete' | 'archive' | 'keep', charge: (job: Job) => unknown) {
  const seen: ParentJob[][] = [];
  const worker = t.worker({
    handlers: {
      charge,
      ship: async (_job: Job, context) => {
        seen.push(await context.parents());
      },
    },
    onSuccess: policy,
    pollIntervalMs: 50,
    sweepIntervalMs: 100,
  });
  await worker.start();
  return seen;
}

describe('a parent is kept until its children have started', () => {
  it.each(['delete', 'archive'] as const)(
    "under '%s': getJob shows the parent, succeeded with its result, while its child waits; then the policy applies",
    async (policy) => {
      const [parent, other, child] = await t.skiplock.enqueueMany([
        { kind: 'charge', payload: { n: 1 }, ref: 'p' },
        // Not due: the child waits for it after the first parent ended.
        { kind: 'charge', payload: { n: 2 }, ref: 'o', delayMs: 3_600_000 },
        { kind: 'ship', payload: {}, dependsOn: ['p', 'o'] },
      ]);
      const seen = await startWorker(policy, (job) => ({ charged: (job.payload as { n: number }).n }));
      await waitFor(
        async () => (await t.row(parent!.id))?.status === 'succeeded',
        30_000,
        'the parent to end',
      );
      // A pass while the child still waits leaves the parent where it is, and so does retention.
      expect(await settlePass()).toEqual({ locked: 1, settled: 0, archived: 0 });
      expect(await t.skiplock.prune({ olderThanMs: 0, status: ['succeeded'] })).toMatchObject({ jobs: 0 });
      expect(await t.skiplock.getJob(parent!.id)).toMatchObject({
        id: parent!.id,
        status: 'succeeded',
        result: { charged: 1 },
      });
      expect(await t.row(child!.id)).toMatchObject({ status: 'waiting' });
      expect(await archived(parent!.id)).toEqual([]);

      await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [other!.id]);
      await waitFor(() => seen.length === 1, 30_000, 'the child to run');
      expect(seen[0]).toEqual([
        { id: parent!.id, kind: 'charge', status: 'succeeded', result: { charged: 1 } },
        { id: other!.id, kind: 'charge', status: 'succeeded', result: { charged: 2 } },
      ]);
      await waitFor(
        async () => (await t.jobCount()) === 0,
        30_000,
        'the maintenance loop to apply the policy',
        () => t.query(`SELECT id, status, on_success FROM ${t.jobs}`),
      );
      expect(await t.skiplock.getJob(parent!.id)).toBeUndefined();
      expect(await t.skiplock.getJob(other!.id)).toBeUndefined();
      expect(await archived(parent!.id)).toEqual(
        policy === 'archive' ? [{ status: 'succeeded', result: { charged: 1 } }] : [],
      );
    },
  );

  it("under 'keep' the parent stays as before, its policy untouched", async () => {
    const [parent, child] = await t.skiplock.enqueueMany([
      { kind: 'charge', payload: {}, ref: 'p' },
      { kind: 'ship', payload: {}, dependsOn: ['p'] },
    ]);
    const worker = t.worker({
      handlers: { charge: () => ({ charged: 3 }), ship: () => ({ shipped: true }) },
      onSuccess: 'keep',
      pollIntervalMs: 50,
      sweepIntervalMs: 100,
    });
    await worker.start();
    await waitFor(async () => (await t.row(child!.id))?.status === 'succeeded', 30_000, 'the child to run');
    expect(await settlePass()).toEqual({ locked: 0, settled: 0, archived: 0 });
    expect(await t.skiplock.getJob(parent!.id)).toMatchObject({
      status: 'succeeded',
      result: { charged: 3 },
    });
    expect(await t.query(`SELECT on_success FROM ${t.jobs} WHERE id = $1`, [parent!.id])).toEqual([
      { on_success: null },
    ]);
  });

  it('a parent whose only child ended before it did (cancelled by hand) goes at the next pass', async () => {
    const [parent, child] = await t.skiplock.enqueueMany([
      { kind: 'charge', payload: {}, ref: 'p', delayMs: 3_600_000 },
      { kind: 'ship', payload: {}, dependsOn: ['p'] },
    ]);
    await t.query(`UPDATE ${t.jobs} SET status = 'cancelled', finished_at = now() WHERE id = $1`, [
      child!.id,
    ]);
    await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [parent!.id]);
    const worker = t.worker({ handlers: { charge: () => 7, ship: () => {} }, pollIntervalMs: 50 });
    await worker.start();
    // The worker's own maintenance pass may come first (its first runs as it
    // starts, which a loaded machine can delay past the parent's end).
    await waitFor(
      async () =>
        (await t.row(parent!.id))?.status !== 'queued' && (await t.row(parent!.id))?.status !== 'running',
      30_000,
      'the parent to end',
    );
    const pass = await settlePass();
    expect([
      { locked: 1, settled: 1, archived: 0 },
      { locked: 0, settled: 0, archived: 0 },
    ]).toContainEqual(pass);
    expect(await t.skiplock.getJob(parent!.id)).toBeUndefined();
  });
});

describe("a child's enqueue racing its parent's finish", () => {
  it.each(['delete', 'archive', 'keep'] as const)(
    "under '%s': the finish waits for the enqueue's lock, and the child reads the parent's status and result",
    async (policy) => {
      const running = gate();
      const finishing = gate();
      const seen = await startWorker(policy, async () => {
        running.open();
        await finishing.opened;
        return { charged: 42 };
      });
      const parent = await t.skiplock.enqueue('charge', {});
      await running.opened;
      const client = await t.skiplock.pool.connect();
      let childId: string;
      try {
        await client.query('BEGIN');
        const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        const pid = rows[0]!.pid;
        childId = (await t.skiplock.enqueue('ship', {}, { dependsOn: [parent.id], client })).id;
        finishing.open();
        // The worker's finish statement waits on the parent's row, locked by the open enqueue.
        const waiting = async () =>
          t.query<{ query: string }>(
            `SELECT query FROM pg_stat_activity
             WHERE $1::int = ANY (pg_blocking_pids(pid))
               AND (query LIKE 'WITH succeeded AS%' OR query LIKE 'WITH archived AS%')`,
            [pid],
          );
        await waitFor(
          async () => (await waiting()).length === 1,
          30_000,
          'the finish to wait for the lock',
          waiting,
        );
        expect(await t.row(parent.id)).toMatchObject({ status: 'running' });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      await waitFor(() => seen.length === 1, 30_000, 'the child to run');
      expect(seen[0]).toEqual([
        { id: parent.id, kind: 'charge', status: 'succeeded', result: { charged: 42 } },
      ]);
      const ran = async () => (await t.row(childId))?.status;
      if (policy === 'keep') {
        await waitFor(async () => (await ran()) === 'succeeded', 30_000, 'the child to end', ran);
        expect(await t.skiplock.getJob(parent.id)).toMatchObject({
          status: 'succeeded',
          result: { charged: 42 },
        });
      } else {
        await waitFor(async () => (await t.jobCount()) === 0, 30_000, 'the policy to apply');
        expect(await archived(parent.id)).toEqual(
          policy === 'archive' ? [{ status: 'succeeded', result: { charged: 42 } }] : [],
        );
      }
    },
  );

  it('a child enqueued after its parent committed its end under delete (no children then) is refused, nothing waits', async () => {
    const parent = await t.skiplock.enqueue('charge', {});
    const worker = t.worker({ handlers: { charge: () => 1 }, pollIntervalMs: 50 });
    await worker.start();
    await waitFor(async () => (await t.row(parent.id)) === undefined, 30_000, 'the parent to be deleted');
    await expect(t.skiplock.enqueue('ship', {}, { dependsOn: [parent.id] })).rejects.toThrow(
      `no job ${parent.id}`,
    );
    expect(await t.jobCount()).toBe(0);
  });
});
