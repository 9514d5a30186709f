/**
 * Group storm: four worker processes drain a queue with groupConcurrency 1
 * over fifty group keys while producers keep enqueuing and the parent
 * SIGKILLs random workers and starts their replacements. A sampler reads each
 * key's running count from the database every 10 ms. Then:
 *
 * - no key ever had two running jobs (a killed worker's job stays `running`
 *   until the sweeper reclaims its lease, and holds its key until then);
 * - every job succeeded with its effect, none was lost, no attempt ran twice.
 *
 * Replay a run's choices with `CHAOS_SEED=<the printed seed>`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expectEveryJobDone, tallyFigure, useChaosDatabase, workerConfig } from './support/cluster.js';
import type { SleepPayload } from './support/protocol.js';
import { chaosSeed, SeededRandom } from './support/random.js';
import { WorkerFleet } from './support/worker-fleet.js';

const t = useChaosDatabase();

const QUEUE = 'group-storm';
const KIND = 'nap';
const KEYS = 50;
const PRODUCERS = 3;
/** Jobs each producer enqueues, in small batches with pauses between them. */
const JOBS_PER_PRODUCER = 400;
const JOB_COUNT = PRODUCERS * JOBS_PER_PRODUCER;
const WORKER_COUNT = 4;
const KILLS = 6;

describe('chaos: group storm', () => {
  it('groupConcurrency 1 holds while workers are SIGKILLed and replaced and producers enqueue; every job succeeds', async () => {
    const seed = chaosSeed();
    console.log(`[chaos] group-storm: seed=${seed} (replay with CHAOS_SEED=${seed})`);
    const random = new SeededRandom(seed);
    await t.skiplock.setQueueLimits(QUEUE, { groupConcurrency: 1 });

    // The sampler: the largest running count of any key, every 10 ms, on a connection of its own.
    const sampler = new pg.Client({ connectionString: t.db.url });
    await sampler.connect();
    t.defer(() => sampler.end());
    let sampling = true;
    let samples = 0;
    let maxRunningPerKey = 0;
    let busiestSample = 0;
    const sampled = (async () => {
      while (sampling) {
        const { rows } = await sampler.query<{ max: number; keys: number }>(
          `SELECT COALESCE(max(n), 0)::int AS max, count(*)::int AS keys FROM (
             SELECT count(*) AS n FROM ${t.jobs}
             WHERE queue = $1 AND status = 'running' AND group_key IS NOT NULL GROUP BY group_key) c`,
          [QUEUE],
        );
        maxRunningPerKey = Math.max(maxRunningPerKey, rows[0]!.max);
        busiestSample = Math.max(busiestSample, rows[0]!.keys);
        samples++;
        await sleep(10);
      }
    })();
    t.defer(async () => {
      sampling = false;
      await sampled.catch(() => {});
    });

    const fleet = new WorkerFleet(t, () =>
      workerConfig(t, { queues: [QUEUE], concurrency: 4, sleepKinds: [KIND] }),
    );
    await fleet.start(WORKER_COUNT);

    const ids: string[] = [];
    const producer = async (p: number) => {
      for (let done = 0; done < JOBS_PER_PRODUCER; ) {
        const n = Math.min(random.int(5, 40), JOBS_PER_PRODUCER - done);
        const batch = Array.from({ length: n }, () => {
          const payload: SleepPayload = { ms: random.int(5, 30), cooperative: true };
          return { kind: KIND, payload, queue: QUEUE, groupKey: `key-${random.int(0, KEYS - 1)}` };
        });
        ids.push(...(await t.skiplock.enqueueMany(batch)).map((j) => j.id));
        done += n;
        await sleep(random.int(10, 80));
      }
      return p;
    };
    const producing = Promise.all(Array.from({ length: PRODUCERS }, (_, p) => producer(p)));

    await fleet.killAlong({
      count: KILLS,
      total: JOB_COUNT,
      progress: t.deliveries,
      unit: 'deliveries',
      timeoutMs: 120_000,
    });
    await producing;
    expect(ids).toHaveLength(JOB_COUNT);
    await t.settle(ids, 180_000);
    sampling = false;
    await sampled;

    const counted = await t.tally(ids);
    const attempts = await t.attempts(ids);
    tallyFigure('group-storm', counted, {
      kills: fleet.kills,
      restarts: fleet.spawned.length - WORKER_COUNT,
      keys: KEYS,
      samples,
      maxRunningPerKey,
      mostKeysRunning: busiestSample,
      reclaimed: attempts.reclaimed,
    });
    expect(fleet.kills).toBe(KILLS);
    expect(samples).toBeGreaterThan(50);
    expect(maxRunningPerKey).toBe(1);
    // Keys ran side by side: the limit is per key, not per queue.
    expect(busiestSample).toBeGreaterThan(1);
    expectEveryJobDone(counted);
    expect(counted.duplicates).toBeLessThanOrEqual(attempts.reclaimed);
    await Promise.all(fleet.alive.map((p) => p.shutdown()));
    for (const p of fleet.alive) expect(p.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
