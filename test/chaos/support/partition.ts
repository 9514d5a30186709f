/**
 * The half-open partition scenario, whatever cuts the network (a proxy that
 * stops forwarding, or a link taken down between network namespaces): one
 * worker holds two jobs; its network goes silent for longer than the
 * visibility timeout; another worker reclaims and runs them; the partitioned
 * worker's handlers end meanwhile, so their results wait in the partition;
 * the network heals. Its late results change nothing (no column of the rows
 * moves but the other worker's heartbeat time), and once the other worker is gone it claims a new job by itself.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import type { TestContext } from '../../support/fixture.js';
import { tally, type WorkerProcess } from './cluster.js';

/** What a partition scenario is run with. */
export interface PartitionScenario {
  queue: string;
  /** A running worker of `queue` (concurrency 2 or more) whose network `partition()` cuts. */
  cut: WorkerProcess;
  /** Starts the other worker of `queue` (its network stays up); called once the partition began. */
  startOther(): Promise<WorkerProcess>;
  partition(): unknown;
  heal(): unknown;
  visibilityTimeoutMs: number;
}

/** What the scenario measured, for its figure line. */
export interface PartitionFigures {
  jobs: number;
  effects: number;
  duplicates: number;
  lost: number;
  partitionMs: number;
  reclaimedMs: number;
  stale: number;
  leaseLostByHeartbeat: number;
}

/** Long enough for TCP to retransmit after a heal (its backoff grows while the link is down). */
const AFTER_HEAL_MS = 30_000;

/** Awaits `waiting`; a failure says which step of the scenario it was. */
async function step<T>(what: string, waiting: Promise<T>, workers: WorkerProcess[]): Promise<T> {
  try {
    return await waiting;
  } catch (error) {
    const recent = workers.map((w) => `worker ${w.pid}: ${JSON.stringify(w.messages.slice(-8))}`);
    throw new Error(
      [`${what}: ${error instanceof Error ? error.message : String(error)}`, ...recent].join('\n'),
      { cause: error },
    );
  }
}

/** Runs the scenario with its assertions; the `cut` worker is still running at the end. */
export async function partitionAndHeal(t: TestContext, s: PartitionScenario): Promise<PartitionFigures> {
  const { cut, queue } = s;
  // Every column but locked_at, which the other worker's heartbeats move on (its own lease: same
  // locked_by and lease_seq).
  const rows = async (ids: string[]) =>
    (
      await t.query<{ row: Record<string, unknown> }>(
        `SELECT to_jsonb(j) - 'locked_at' AS row FROM ${t.jobs} j WHERE id = ANY($1::bigint[]) ORDER BY id`,
        [ids],
      )
    ).map((r) => r.row);
  const x = await t.skiplock.enqueue('block', {}, { queue });
  const y = await t.skiplock.enqueue('block', {}, { queue });
  const ids = [x.id, y.id];
  for (const id of ids)
    await step(
      'the first attempts start',
      cut.next('started', (m) => m.id === id && m.attempts === 1),
      [cut],
    );

  await s.partition();
  const partitionedAt = Date.now();
  // Started only now, so that only a reclaim can give it the partitioned worker's jobs.
  const other = await s.startOther();
  for (const id of ids) {
    await step(
      'the other worker reclaims',
      other.next('started', (m) => m.id === id && m.attempts === 2, 30_000),
      [cut, other],
    );
  }
  // From the partition: the lease ran from the last heartbeat before it, so this may be a little
  // under the visibility timeout.
  const reclaimedMs = Date.now() - partitionedAt;
  const second = await rows(ids);
  expect(second.map((r) => [r.status, r.attempts, r.locked_by, r.last_error])).toEqual([
    ['running', 2, other.workerId, 'reclaimed: visibility timeout'],
    ['running', 2, other.workerId, 'reclaimed: visibility timeout'],
  ]);

  // The partitioned worker's handlers end now: their results wait in the partition.
  cut.send({ type: 'finish', id: x.id, outcome: 'ok' });
  cut.send({ type: 'finish', id: y.id, outcome: 'permanent' });
  for (const id of ids) await cut.next('finishing', (m) => m.id === id);
  // The partition outlasts the visibility timeout, whatever the reclaim took (a length the scenario
  // asks for, not a wait for work).
  const left = partitionedAt + s.visibilityTimeoutMs - Date.now();
  if (left > 0) await sleep(left);
  await s.heal();
  const partitionMs = Date.now() - partitionedAt;
  expect(partitionMs).toBeGreaterThanOrEqual(s.visibilityTimeoutMs);
  for (const id of ids) {
    await step(
      'the late results are refused',
      cut.next('job:stale', (m) => m.id === id && m.attempts === 1, AFTER_HEAL_MS),
      [cut],
    );
  }
  // The late success did not end x, the late permanent failure did not fail y: no column moved.
  expect(await rows(ids)).toEqual(second);
  expect(cut.reported('job:success')).toEqual([]);
  expect(cut.reported('job:failure')).toEqual([]);

  for (const id of ids) other.send({ type: 'finish', id, outcome: 'ok' });
  for (const id of ids) await other.next('job:success', (m) => m.id === id && m.attempts === 2);
  expect((await rows(ids)).map((r) => [r.status, r.attempts, r.locked_by, r.last_error])).toEqual([
    ['succeeded', 2, null, 'reclaimed: visibility timeout'],
    ['succeeded', 2, null, 'reclaimed: visibility timeout'],
  ]);
  const counted = await tally(t.db.pool, t.schema, ids);
  expect(counted).toMatchObject({ effects: 2, duplicates: 2, lost: 0, sameAttemptTwice: 0 });

  // Alone again, the healed worker claims and finishes a new job by itself.
  await other.shutdown();
  expect(other.exit).toEqual({ code: null, signal: 'SIGTERM' });
  const z = await t.skiplock.enqueue('block', {}, { queue });
  await step(
    'the healed worker claims a new job',
    cut.next('started', (m) => m.id === z.id && m.attempts === 1, AFTER_HEAL_MS),
    [cut],
  );
  cut.send({ type: 'finish', id: z.id, outcome: 'ok' });
  await cut.next('job:success', (m) => m.id === z.id && m.attempts === 1);
  expect(await t.row(z.id)).toEqual({ status: 'succeeded', attempts: 1, locked_by: null, last_error: null });
  expect(cut.alive).toBe(true);
  return {
    jobs: 3,
    effects: counted.effects + 1,
    duplicates: counted.duplicates,
    lost: counted.lost,
    partitionMs,
    reclaimedMs,
    stale: cut.reported('job:stale').length,
    leaseLostByHeartbeat: cut.reported('lease:lost').length,
  };
}
