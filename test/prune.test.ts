import { describe, expect, it } from 'vitest';
import { type JobMap, ValidationError, type Worker, type WorkerOptions } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();
const archive = db.archive;

/** A worker on `queue` that prunes every 100 ms, after `retention`. */
const pruningWorker = (queue: string, retention: Pick<WorkerOptions<JobMap>, 'retentionMs' | 'retention'>) =>
  skiplock.worker({
    handleSignals: false,
    queues: [queue],
    ...retention,
    pruneIntervalMs: 100,
    handlers: { k: async () => {} },
  });

/** Starts `worker` and resolves with what its first prune deleted. */
async function firstPrune(worker: Worker) {
  const pruned = nextEvent(worker, 'worker:prune');
  await worker.start();
  const [result] = await pruned;
  return result;
}

/** One seeded group: `count` jobs of `status` in `queue`, finished `ageMinutes` ago (null: not finished). */
type Seed = [queue: string, status: string, count: number, ageMinutes: number | null];

/** Inserts the jobs of each group, in order. */
async function seed(...groups: Seed[]) {
  for (const [queue, status, count, ageMinutes] of groups) {
    await db.query(
      `INSERT INTO ${db.jobs} (kind, queue, status, finished_at)
       SELECT 'k', $1, $2, CASE WHEN $3::int IS NULL THEN NULL ELSE now() - make_interval(mins => $3::int) END
       FROM generate_series(1, $4)`,
      [queue, status, ageMinutes, count],
    );
  }
}

async function counts(): Promise<Record<string, number>> {
  const rows = await db.query<{ key: string; n: number }>(
    `SELECT queue || ':' || status AS key, count(*)::int AS n FROM ${db.jobs} GROUP BY 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.key, r.n]));
}

describe('prune', () => {
  it('deletes only finished rows older than the age, of the given statuses, in batches', async () => {
    await seed(
      ['old', 'succeeded', 2500, 120],
      ['old', 'failed', 3, 120],
      ['old', 'dead', 4, 120],
      ['old', 'cancelled', 5, 120],
      ['new', 'succeeded', 6, 1],
      ['old', 'queued', 7, null],
      ['old', 'running', 8, null],
    );
    await db.query(
      `INSERT INTO ${archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
       SELECT g, 'arch', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - make_interval(mins => CASE WHEN g <= 1200 THEN 120 ELSE 1 END)
       FROM generate_series(1, 1300) g`,
    );

    expect(await skiplock.prune({ olderThanMs: 3_600_000, status: ['failed', 'cancelled'] })).toEqual({
      jobs: 8,
      archive: 0,
      archivePartitions: 0,
    });
    // 2500 old succeeded rows: three batches of at most 1000; 1200 old archived rows: two.
    expect(await skiplock.prune({ olderThanMs: 3_600_000, status: 'succeeded' })).toEqual({
      jobs: 2500,
      archive: 1200,
      archivePartitions: 0,
    });
    expect(await counts()).toEqual({
      'old:dead': 4,
      'new:succeeded': 6,
      'old:queued': 7,
      'old:running': 8,
    });
    expect(await skiplock.prune({ olderThanMs: 3_600_000 })).toEqual({
      jobs: 4,
      archive: 0,
      archivePartitions: 0,
    });
    expect(await db.query(`SELECT count(*)::int AS n FROM ${archive}`)).toEqual([{ n: 100 }]);
    expect(await skiplock.prune({ olderThanMs: 0 })).toEqual({ jobs: 6, archive: 100, archivePartitions: 0 });
    expect(await counts()).toEqual({ 'old:queued': 7, 'old:running': 8 });
  });

  it('prunes each status after its own age, in batches of 1000', async () => {
    await seed(
      ['ps', 'succeeded', 2300, 120],
      ['ps', 'succeeded', 5, 10],
      ['ps', 'failed', 6, 120],
      ['ps', 'dead', 7, 120],
      ['ps', 'dead', 8, 10],
      ['ps', 'cancelled', 9, 120],
    );
    const before = await counts();
    expect(
      await skiplock.prune({ retention: { succeeded: 3_600_000, dead: 60_000, failed: 7_200_000 + 60_000 } }),
    ).toEqual({ jobs: 2300 + 15, archive: 0, archivePartitions: 0 });
    expect(await counts()).toEqual({
      ...before,
      'ps:succeeded': 5,
      'ps:failed': 6,
      'ps:dead': undefined,
      'ps:cancelled': 9,
    });
    await db.query(`DELETE FROM ${db.jobs} WHERE queue = 'ps'`);
  });

  it('refuses a bad filter', async () => {
    await expect(skiplock.prune({} as never)).rejects.toBeInstanceOf(ValidationError);
    await expect(skiplock.prune({ olderThanMs: 1, retention: { dead: 1 } } as never)).rejects.toThrow(
      /filter\.retention/,
    );
    await expect(skiplock.prune({ retention: { dead: -1 } })).rejects.toThrow(/retention\.dead/);
    await expect(skiplock.prune({ retention: { queued: 1 } as never })).rejects.toThrow(/retention/);
    const worker = (retention: unknown) =>
      skiplock.worker({
        handleSignals: false,
        maintenanceOnly: true,
        handlers: {},
        retention: retention as never,
      });
    expect(() => worker({ dead: -1 })).toThrow(/worker\.retention\.dead/);
    expect(() => worker({ archive: Number.NaN })).toThrow(/worker\.retention\.archive/);
    expect(() => worker([])).toThrow(/worker\.retention/);
    await expect(skiplock.prune({ olderThanMs: -1 })).rejects.toThrow(/olderThanMs/);
    await expect(skiplock.prune({ olderThanMs: 1, status: 'queued' as never })).rejects.toThrow(/status/);
  });

  it('a worker with retentionMs prunes periodically, keeping dead letters', async () => {
    await seed(
      ['w', 'succeeded', 3, 10],
      ['w', 'dead', 2, 10],
      ['w', 'cancelled', 1, 10],
      ['w', 'succeeded', 4, 0],
    );
    const worker = pruningWorker('w', { retentionMs: 60_000 });
    expect(await firstPrune(worker)).toEqual({ jobs: 4, archive: 0, archivePartitions: 0 });
    await waitFor(async () => (await counts())['w:succeeded'] === 4, 5000, 'the prune to commit');
    expect(await counts()).toMatchObject({ 'w:dead': 2, 'w:succeeded': 4 });
    expect((await counts())['w:cancelled']).toBeUndefined();
    await worker.stop();
  });

  it('a worker with retention prunes each status after its own age; retentionMs fills the rest', async () => {
    // The prune is not per queue: the previous test's dead letters would go too.
    await db.query(`DELETE FROM ${db.jobs} WHERE queue = 'w'`);
    await seed(
      ['r', 'succeeded', 3, 10],
      ['r', 'failed', 2, 10],
      ['r', 'dead', 4, 10],
      ['r', 'dead', 1, 0],
      ['r', 'cancelled', 5, 10],
    );
    const worker = pruningWorker('r', {
      retentionMs: 60_000,
      retention: { dead: 60_000, cancelled: 3_600_000 },
    });
    expect(worker.options.retention).toEqual({
      succeeded: 60_000,
      failed: 60_000,
      dead: 60_000,
      cancelled: 3_600_000,
      archive: 60_000,
    });
    expect(await firstPrune(worker)).toEqual({ jobs: 9, archive: 0, archivePartitions: 0 });
    await waitFor(async () => (await counts())['r:dead'] === 1, 5000, 'the prune to commit');
    const left = await counts();
    expect([left['r:succeeded'], left['r:failed'], left['r:dead'], left['r:cancelled']]).toEqual([
      undefined,
      undefined,
      1,
      5,
    ]);
    await worker.stop();
  });
});
