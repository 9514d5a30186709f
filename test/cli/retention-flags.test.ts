/**
 * The per-status retention flags of `prune` and `worker`: each maps to the
 * library's `retention` option; a bad value is exit 2 naming the flag.
 */
import { describe, expect, it } from 'vitest';
import { archiveThreeDaysAgo } from '../support/archive-day.js';
import { TEST_SCHEMA, waitFor } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { cliOn, connectionFlags, runCliEach, spawnCli } from './cli-process.js';

const { db } = useFileDatabase();
const conn = connectionFlags(db.url, TEST_SCHEMA);
const cli = cliOn(() => ({ url: db.url, schema: TEST_SCHEMA }));

/** Inserts one finished job per [status, minutes ago] in `queue`; returns their ids in order. */
async function finished(queue: string, rows: [string, number][]): Promise<string[]> {
  const ids: string[] = [];
  for (const [status, minutesAgo] of rows) {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (queue, kind, payload, status, attempts, max_attempts, finished_at)
       VALUES ($1, 'k', '{}', $2, 1, 1, now() - $3 * interval '1 minute') RETURNING id::text`,
      [queue, status, minutesAgo],
    );
    ids.push(row!.id);
  }
  return ids;
}

async function left(queue: string): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `SELECT id::text FROM ${db.jobs} WHERE queue = $1 ORDER BY id`,
    [queue],
  );
  return rows.map((r) => r.id);
}

describe('retention flags', () => {
  it('prune: --retention-<status> alone prunes only the statuses named', async () => {
    const [succeeded, failed, oldDead, newDead, cancelled] = await finished('rf-a', [
      ['succeeded', 120],
      ['failed', 120],
      ['dead', 120],
      ['dead', 10],
      ['cancelled', 120],
    ]);
    const pruned = await cli('prune', '--retention-dead', '3600000', '--json');
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(JSON.parse(pruned.stdout)).toEqual({ jobs: 1, archive: 0, archivePartitions: 0 });
    expect(await left('rf-a')).toEqual([succeeded, failed, newDead, cancelled]);
    expect(oldDead).toBeDefined();
    // The next tests prune the whole schema: leave nothing of this one behind.
    await db.query(`DELETE FROM ${db.jobs} WHERE queue = 'rf-a'`);
  });

  it('prune: --older-than-ms for every status and the archive, a --retention-<status> flag overriding it', async () => {
    const [succeeded, , , newDead] = await finished('rf-b', [
      ['succeeded', 120],
      ['failed', 120],
      ['cancelled', 120],
      ['dead', 10],
    ]);
    await archiveThreeDaysAgo(db, 'rf-b', 800000);
    const pruned = await cli(
      'prune',
      '--older-than-ms',
      '3600000',
      '--retention-succeeded',
      '86400000',
      '--json',
    );
    expect(pruned.code, pruned.stderr).toBe(0);
    // failed and cancelled (2 h > 1 h) deleted; succeeded kept for a day; the 3-day-old archive day dropped.
    expect(JSON.parse(pruned.stdout)).toEqual({ jobs: 2, archive: 0, archivePartitions: 1 });
    expect(await left('rf-b')).toEqual([succeeded, newDead]);
    const archived = await db.query(`SELECT id FROM ${db.archive} WHERE queue = 'rf-b'`);
    expect(archived).toEqual([]);
    await db.query(`DELETE FROM ${db.jobs} WHERE queue = 'rf-b'`);
  });

  it('bad values are exit 2 with a message naming the flag, and nothing is pruned', async () => {
    const [dead] = await finished('rf-c', [['dead', 120]]);
    const cases: [string[], string][] = [
      [['prune', '--retention-dead', 'abc'], '--retention-dead'],
      [['prune', '--retention-failed', '-1'], '--retention-failed'],
      [['prune', '--retention-cancelled', '1.5'], '--retention-cancelled'],
      [['prune', '--retention-archive', '1e3'], '--retention-archive'],
      [['prune', '--retention-succeeded', '3155760000001'], '--retention-succeeded'],
      [['prune', '--status', 'dead', '--retention-dead', '60000'], '--status'],
      [['prune'], '--older-than-ms'],
      [['worker', '--maintenance-only', '--retention-dead', 'week'], '--retention-dead'],
      [['worker', '--maintenance-only', '--retention-archive', '-5'], '--retention-archive'],
    ];
    const results = await runCliEach(cases.map(([args]) => [...args, ...conn]));
    cases.forEach(([args, flag], i) => {
      const result = results[i]!;
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr, args.join(' ')).toContain(flag);
    });
    expect(await left('rf-c')).toEqual([dead]);
    await db.query(`DELETE FROM ${db.jobs} WHERE queue = 'rf-c'`);
  }, 240_000);

  it('worker: the flags become its retention, and its pruner deletes by them', async () => {
    const [, keptDead, cancelled] = await finished('rf-d', [
      ['dead', 180],
      ['dead', 30],
      ['cancelled', 30],
    ]);
    const run = spawnCli([
      'worker',
      '--maintenance-only',
      '--retention-ms',
      '7200000',
      '--retention-dead',
      '3600000',
      '--retention-archive',
      '86400000',
      '--prune-interval-ms',
      '100',
      ...conn,
    ]);
    try {
      await run.waitForOutput(/maintenance-only worker started/);
      const started = run
        .stdout()
        .split('\n')
        .map((line) => (line.startsWith('{') ? JSON.parse(line) : {}))
        .find((line) => /worker started/.test(line.msg ?? ''));
      expect(started.retention).toEqual({
        succeeded: 7_200_000,
        failed: 7_200_000,
        dead: 3_600_000,
        cancelled: 7_200_000,
        archive: 86_400_000,
      });
      // The 3-hour-old dead letter goes (dead after 1 h); the others are younger than their ages.
      await waitFor(
        async () => (await left('rf-d')).length === 2,
        30_000,
        'the old dead letter to be pruned',
      );
      expect(await left('rf-d')).toEqual([keptDead, cancelled]);
    } finally {
      run.child.kill('SIGTERM');
      await run.exited;
    }
  });
});
