/**
 * Fan-ins under worker crashes: worker processes running the parents of many
 * fan-in jobs are SIGKILLed at random and replaced. Every job ends succeeded
 * with its effect, and no child ran before every one of its parents had
 * delivered its effect (a child released early, or twice, would show here).
 */
import { describe, expect, it } from 'vitest';
import { countRows, waitFor } from '../support/database.js';
import {
  effectTables,
  expectEveryJobDone,
  figure,
  tally,
  useChaosDatabase,
  workerConfig,
} from './support/cluster.js';
import { WorkerFleet } from './support/worker-fleet.js';

const t = useChaosDatabase();

const deliveries = () => countRows(t.db.pool, effectTables(t.schema).deliveries);

describe('chaos: dependencies under worker crashes', () => {
  it('SIGKILLed workers neither lose a fan-in nor start one before its parents ended', async () => {
    const queue = 'fan';
    const groups = 60;
    const parentsPerGroup = 20;
    const killCount = 5;
    const fleet = new WorkerFleet(t, () => workerConfig(t, { queues: [queue], concurrency: 8 }));
    await fleet.start(3);
    const items = Array.from({ length: groups }, (_, g) => [
      ...Array.from({ length: parentsPerGroup }, (_, p) => ({
        kind: 'effect',
        payload: { g, p },
        queue,
        ref: `g${g}p${p}`,
      })),
      {
        kind: 'effect',
        payload: { g },
        queue,
        dependsOn: Array.from({ length: parentsPerGroup }, (_, p) => `g${g}p${p}`),
      },
    ]).flat();
    const jobs = await t.skiplock.enqueueMany(items);
    const ids = jobs.map((j) => j.id);
    const step = Math.floor(jobs.length / (killCount + 1));
    for (let k = 1; k <= killCount; k++) {
      await waitFor(
        async () => (await deliveries()) >= k * step,
        120_000,
        `${k * step} deliveries`,
        deliveries,
      );
      await fleet.killAndReplace();
    }
    const unfinished = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${t.jobs} WHERE id = ANY($1::bigint[]) AND status <> 'succeeded'`,
          [ids],
        )
      )[0]!.n;
    await waitFor(async () => (await unfinished()) === 0, 180_000, 'every job to succeed', unfinished);
    const counted = await tally(t.db.pool, t.schema, ids);
    expectEveryJobDone(counted);
    // Each child's first delivery came after the last delivery of each of its parents.
    const { deliveries: table } = effectTables(t.schema);
    const early = await t.query<{ child: string }>(
      `SELECT d.child_id AS child
       FROM ${t.jobs.replace(/\.jobs$/, '.job_dependencies')} d
       WHERE d.child_id = ANY($1::bigint[])
       GROUP BY d.child_id
       HAVING (SELECT min(at) FROM ${table} WHERE job_id = d.child_id)
              <= max((SELECT max(at) FROM ${table} WHERE job_id = d.parent_id))`,
      [ids],
    );
    const children = jobs.filter((_, i) => (i + 1) % (parentsPerGroup + 1) === 0).map((j) => j.id);
    const pending = await t.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${t.jobs} WHERE id = ANY($1::bigint[]) AND pending_parents = 0`,
      [children],
    );
    figure('dependencies-crash', {
      jobs: counted.jobs,
      kills: killCount,
      restarts: killCount,
      effects: counted.effects,
      duplicates: counted.duplicates,
      lost: counted.lost,
      early: early.length,
    });
    expect(early).toEqual([]);
    expect(pending).toEqual([{ n: groups }]);
  });
});
