import { describe, expect, it } from 'vitest';
import { ValidationError } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();
const archive = db.archive;

/** Inserts `count` jobs of `status` in `queue`, finished `ageMinutes` ago (null: not finished). */
async function seed(queue: string, status: string, count: number, ageMinutes: number | null) {
  await db.query(
    `INSERT INTO ${db.jobs} (kind, queue, status, finished_at)
     SELECT 'k', $1, $2, CASE WHEN $3::int IS NULL THEN NULL ELSE now() - make_interval(mins => $3::int) END
     FROM generate_series(1, $4)`,
    [queue, status, ageMinutes, count],
  );
}

async function counts(): Promise<Record<string, number>> {
  const rows = await db.query<{ key: string; n: number }>(
    `SELECT queue || ':' || status AS key, count(*)::int AS n FROM ${db.jobs} GROUP BY 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.key, r.n]));
}

describe('prune', () => {
  it('deletes only finished rows older than the age, of the given statuses, in batches', async () => {
    await seed('old', 'succeeded', 2500, 120);
    await seed('old', 'failed', 3, 120);
    await seed('old', 'dead', 4, 120);
    await seed('old', 'cancelled', 5, 120);
    await seed('new', 'succeeded', 6, 1);
    await seed('old', 'queued', 7, null);
    await seed('old', 'running', 8, null);
    await db.query(
      `INSERT INTO ${archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at)
       SELECT g, 'arch', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now() - make_interval(mins => CASE WHEN g <= 1200 THEN 120 ELSE 1 END)
       FROM generate_series(1, 1300) g`,
    );

    expect(await skiplock.prune({ olderThanMs: 3_600_000, status: ['failed', 'cancelled'] })).toEqual({
      jobs: 8,
      archive: 0,
    });
    // 2500 old succeeded rows: three batches of at most 1000; 1200 old archived rows: two.
    expect(await skiplock.prune({ olderThanMs: 3_600_000, status: 'succeeded' })).toEqual({
      jobs: 2500,
      archive: 1200,
    });
    expect(await counts()).toEqual({
      'old:dead': 4,
      'new:succeeded': 6,
      'old:queued': 7,
      'old:running': 8,
    });
    expect(await skiplock.prune({ olderThanMs: 3_600_000 })).toEqual({ jobs: 4, archive: 0 });
    expect(await db.query(`SELECT count(*)::int AS n FROM ${archive}`)).toEqual([{ n: 100 }]);
    expect(await skiplock.prune({ olderThanMs: 0 })).toEqual({ jobs: 6, archive: 100 });
    expect(await counts()).toEqual({ 'old:queued': 7, 'old:running': 8 });
  });

  it('refuses a bad filter', async () => {
    await expect(skiplock.prune({} as never)).rejects.toBeInstanceOf(ValidationError);
    await expect(skiplock.prune({ olderThanMs: -1 })).rejects.toThrow(/olderThanMs/);
    await expect(skiplock.prune({ olderThanMs: 1, status: 'queued' as never })).rejects.toThrow(/status/);
  });

  it('a worker with retentionMs prunes periodically, keeping dead letters', async () => {
    await seed('w', 'succeeded', 3, 10);
    await seed('w', 'dead', 2, 10);
    await seed('w', 'cancelled', 1, 10);
    await seed('w', 'succeeded', 4, 0);
    const worker = skiplock.worker({
      handleSignals: false,
      queues: ['w'],
      retentionMs: 60_000,
      pruneIntervalMs: 100,
      handlers: { k: async () => {} },
    });
    const pruned = nextEvent(worker, 'worker:prune');
    await worker.start();
    const [result] = await pruned;
    expect(result).toEqual({ jobs: 4, archive: 0 });
    await waitFor(async () => (await counts())['w:succeeded'] === 4, 5000, 'the prune to commit');
    expect(await counts()).toMatchObject({ 'w:dead': 2, 'w:succeeded': 4 });
    expect((await counts())['w:cancelled']).toBeUndefined();
    await worker.stop();
  });
});
