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
import { waitFor } from '../support/database.js';
import { expectEveryJobDone, tallyFigure, useChaosDatabase, type WorkerProcess } from './support/cluster.js';
import { enqueueInBatches } from './support/enqueue-batches.js';
import { CRASH_RUN_KILLS, CRASH_RUN_WORKERS, crashRun } from './support/worker-fleet.js';

const t = useChaosDatabase();

const enqueueEffects = (queue: string, count: number) =>
  enqueueInBatches(t.skiplock, count, (n) => ({ kind: 'effect', payload: { n }, queue }));

describe('chaos: worker crash', () => {
  it('SIGKILLed workers lose no job and run none twice in the same attempt', async () => {
    const jobCount = 3000;
    const { fleet, ids } = await crashRun(t, {
      queue: 'crash',
      kind: 'effect',
      jobs: jobCount,
      progress: t.deliveries,
      unit: 'deliveries',
    });
    const counted = await t.tally(ids);
    const attempts = await t.attempts(ids);
    const restarts = fleet.spawned.length - CRASH_RUN_WORKERS;
    tallyFigure('worker-crash', counted, {
      kills: fleet.kills,
      restarts,
      reclaimed: attempts.reclaimed,
      maxAttempts: attempts.max,
    });
    expect(fleet.kills).toBe(CRASH_RUN_KILLS);
    expect(restarts).toBe(CRASH_RUN_KILLS);
    expect(counted.jobs).toBe(jobCount);
    expectEveryJobDone(counted);
    // Each crash costs a job at most one attempt.
    expect(attempts.max).toBeLessThanOrEqual(1 + CRASH_RUN_KILLS);
    // A re-run only happens to a job whose worker died holding it.
    expect(counted.duplicates).toBeLessThanOrEqual(attempts.reclaimed);
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
      const p = t.spawnWorker({ queues: [queue], concurrency: 4 });
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
    await t.settle(ids, 60_000);
    stopping = true;
    const job = await t.skiplock.getJob(poison.id);
    const counted = await t.tally(ids);
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
