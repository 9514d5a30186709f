/**
 * Worker crash: worker processes on thousands of short jobs are killed with
 * SIGKILL at random and replaced. Every job's effect exists exactly once,
 * nothing is left queued or running, no attempt ran twice, and no job went to
 * the dead letter because of the crashes.
 *
 * Poison job: a handler that SIGKILLs its own process every time ends in
 * `dead` after max_attempts (the sweeper does it) while other jobs flow.
 */
import { describe, expect, it } from 'vitest';
import { countRows, waitFor } from '../support/database.js';
import {
  effectTables,
  expectEveryJobDone,
  spawnWorker,
  tally,
  tallyFigure,
  useChaosDatabase,
  type WorkerProcess,
  waitUntilSettled,
  workerConfig,
} from './support/cluster.js';
import { enqueueInBatches } from './support/enqueue-batches.js';
import { WorkerFleet } from './support/worker-fleet.js';

const t = useChaosDatabase();

/** Deliveries so far (the test's schema holds only its own jobs). */
const deliveries = () => countRows(t.db.pool, effectTables(t.schema).deliveries);

const enqueueEffects = (queue: string, count: number) =>
  enqueueInBatches(t.skiplock, count, (n) => ({ kind: 'effect', payload: { n }, queue }));

describe('chaos: worker crash', () => {
  it('SIGKILLed workers lose no job and run none twice in the same attempt', async () => {
    const queue = 'crash';
    const jobCount = 3000;
    const workerCount = 3;
    const killCount = 8;
    const fleet = new WorkerFleet(t, () => workerConfig(t, { queues: [queue], concurrency: 8 }));
    await fleet.start(workerCount);
    const ids = await enqueueEffects(queue, jobCount);

    let kills = 0;
    let restarts = 0;
    const step = Math.floor(jobCount / (killCount + 1));
    for (let k = 1; k <= killCount; k++) {
      await waitFor(
        async () => (await deliveries()) >= k * step,
        60_000,
        `${k * step} deliveries`,
        deliveries,
      );
      // Kill a random worker that is running jobs, and start its replacement (as an orchestrator would).
      await fleet.killAndReplace();
      kills++;
      restarts++;
    }
    await waitUntilSettled(t.db.pool, t.schema, ids, 90_000);
    const counted = await tally(t.db.pool, t.schema, ids);
    const [attempts] = await t.query<{ max: number; reclaimed: number }>(
      `SELECT max(attempts)::int AS max, count(*) FILTER (WHERE attempts > 1)::int AS reclaimed
       FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
      [ids],
    );
    tallyFigure('worker-crash', counted, {
      kills,
      restarts,
      reclaimed: attempts!.reclaimed,
      maxAttempts: attempts!.max,
    });
    expect(kills).toBe(killCount);
    expect(restarts).toBe(killCount);
    expect(counted.jobs).toBe(jobCount);
    expectEveryJobDone(counted);
    // Each crash costs a job at most one attempt.
    expect(attempts!.max).toBeLessThanOrEqual(1 + killCount);
    // A re-run only happens to a job whose worker died holding it.
    expect(counted.duplicates).toBeLessThanOrEqual(attempts!.reclaimed);
    await Promise.all(fleet.alive.map((p) => p.shutdown()));
    for (const p of fleet.alive) expect(p.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});

describe('chaos: poison job', () => {
  it('a handler that kills its process ends dead after max_attempts; other jobs keep flowing', async () => {
    const queue = 'poison';
    const maxAttempts = 3;
    const workerCount = 2;
    const alive = new Set<WorkerProcess>();
    let deaths = 0;
    let restarts = 0;
    let stopping = false;
    // The orchestrator: a worker that dies is replaced.
    const spawn = (): WorkerProcess => {
      const p = spawnWorker(t, workerConfig(t, { queues: [queue], concurrency: 4 }));
      alive.add(p);
      void p.exited.then((exit) => {
        alive.delete(p);
        if (stopping || p.shuttingDown) return;
        if (exit.signal === 'SIGKILL') deaths++;
        restarts++;
        spawn();
      });
      return p;
    };
    await Promise.all(Array.from({ length: workerCount }, () => spawn().ready()));
    const poison = await t.skiplock.enqueue('poison', {}, { queue, maxAttempts });
    const ids = await enqueueEffects(queue, 400);

    await waitFor(
      async () => (await t.skiplock.getJob(poison.id))?.status === 'dead',
      60_000,
      'the poison job to be dead',
    );
    await waitUntilSettled(t.db.pool, t.schema, ids, 60_000);
    stopping = true;
    const job = await t.skiplock.getJob(poison.id);
    const counted = await tally(t.db.pool, t.schema, ids);
    tallyFigure('poison-job', counted, {
      jobs: counted.jobs + 1,
      kills: deaths,
      restarts,
      poisonAttempts: job!.attempts,
    });
    expect(job).toMatchObject({
      status: 'dead',
      attempts: maxAttempts,
      lastError: 'reclaimed: visibility timeout',
      lockedBy: null,
      lockedAt: null,
    });
    expect(job!.finishedAt).toBeInstanceOf(Date);
    // Each attempt killed exactly one process, and no more.
    expect(deaths).toBe(maxAttempts);
    expect(counted.effects).toBe(400);
    expect(counted.lost).toBe(0);
    expect(counted.sameAttemptTwice).toBe(0);
    expect(counted.byStatus).toEqual({ succeeded: 400 });
    await Promise.all([...alive].map((p) => p.shutdown()));
  });
});
