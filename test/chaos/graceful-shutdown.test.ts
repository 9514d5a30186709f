/**
 * Graceful shutdown under an orchestrator: SIGTERM, then SIGKILL after a grace
 * period. With cooperative handlers (they honour the AbortSignal) and
 * uncooperative ones (they ignore it), the worker claims nothing after SIGTERM,
 * gives its unfinished jobs back without charging the attempt when it can, and
 * when it is SIGKILLed first, its jobs are reclaimed by the surviving
 * worker's sweeper once their leases expire.
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../support/database.js';
import { effectTables, tallyFigure, useChaosDatabase, type WorkerProcess } from './support/cluster.js';

const t = useChaosDatabase();

const CONCURRENCY = 4;
const JOBS = 10;
const VISIBILITY_MS = 3000;
const SWEEP_MS = 250;
/** How long the orchestrator waits after SIGTERM before SIGKILL, when the test wants the worker to stop by itself. */
const GENEROUS_GRACE_MS = 30_000;

/** SIGTERM, then SIGKILL when the process is still there after `graceMs`; resolves with how it ended. */
async function orchestratorStop(p: WorkerProcess, graceMs: number) {
  const sentAt = Date.now();
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), graceMs);
  const exit = await p.exited;
  clearTimeout(timer);
  return {
    ...exit,
    afterMs: Date.now() - sentAt,
    killedAt: exit.signal === 'SIGKILL' ? Date.now() : undefined,
  };
}

async function jobsOf(ids: string[]) {
  return t.query<{ id: string; status: string; attempts: number; locked_by: string | null }>(
    `SELECT id, status, attempts, locked_by FROM ${t.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
}

async function deliveriesBy(pid: number, ids: string[]) {
  return t.query<{ job_id: string; attempt: number }>(
    `SELECT job_id::text, attempt FROM ${effectTables(t.schema).deliveries}
     WHERE pid = $1 AND job_id = ANY($2::bigint[]) ORDER BY job_id`,
    [pid, ids],
  );
}

/** A worker holding CONCURRENCY blocked jobs of JOBS, the rest queued. */
async function busyWorker(queue: string, cooperative: boolean, shutdownTimeoutMs: number) {
  const worker = await t.startWorker({
    queues: [queue],
    concurrency: CONCURRENCY,
    shutdownTimeoutMs,
    visibilityTimeoutMs: VISIBILITY_MS,
    sweepIntervalMs: SWEEP_MS,
  });
  const jobs = Array.from({ length: JOBS }, () => ({ kind: 'block', payload: { cooperative }, queue }));
  const ids = (await t.skiplock.enqueueMany(jobs)).map((j) => j.id);
  await waitFor(
    () => worker.reported('started').length === CONCURRENCY,
    20_000,
    'the worker to be full',
    () => worker.reported('started'),
  );
  const started = worker
    .reported('started')
    .map((m) => m.id)
    .sort();
  expect((await jobsOf(ids)).filter((j) => j.status === 'running').map((j) => j.id)).toEqual(started);
  return { worker, ids, started };
}

/** Runs the rest in a fresh worker and checks every job ends succeeded. */
async function finishElsewhere(queue: string, ids: string[]) {
  const other = await t.startWorker({ queues: [queue], concurrency: JOBS });
  other.autoFinish();
  await t.settle(ids, 30_000);
  expect(new Set((await jobsOf(ids)).map((j) => j.status))).toEqual(new Set(['succeeded']));
  await other.shutdown();
}

describe('chaos: graceful shutdown', () => {
  for (const cooperative of [true, false]) {
    const kind = cooperative ? 'cooperative' : 'uncooperative';
    it(`${kind} handlers: SIGTERM releases unfinished jobs uncharged and claims nothing more`, async () => {
      const queue = `graceful-${kind}`;
      const shutdownTimeoutMs = 300;
      const { worker, ids, started } = await busyWorker(queue, cooperative, shutdownTimeoutMs);
      const stop = await orchestratorStop(worker, GENEROUS_GRACE_MS);
      // It stopped by itself (re-raising SIGTERM), not by the orchestrator's SIGKILL, and not before
      // its handlers had their shutdown timeout to finish.
      expect(stop.signal).toBe('SIGTERM');
      expect(stop.afterMs).toBeGreaterThanOrEqual(shutdownTimeoutMs);
      const state = await jobsOf(ids);
      // Nothing running, nothing charged: every job is queued with attempts 0.
      expect(state.map((j) => [j.status, j.attempts, j.locked_by])).toEqual(
        ids.map(() => ['queued', 0, null]),
      );
      expect(
        worker
          .reported('job:released')
          .map((m) => m.id)
          .sort(),
      ).toEqual(started);
      // The only handlers that ever ran in it are the ones started before SIGTERM.
      expect((await deliveriesBy(worker.pid, ids)).map((d) => d.job_id)).toEqual(started);
      expect(worker.reported('job:start')).toHaveLength(CONCURRENCY);
      await finishElsewhere(queue, ids);
      const counted = await t.tally(ids);
      tallyFigure(`graceful-shutdown-${kind}`, counted, {
        kills: 0,
        restarts: 1,
        released: worker.reported('job:released').length,
        claimedAfterSigterm: worker.reported('job:start').length - CONCURRENCY,
        stranded: 0,
        exitMs: stop.afterMs,
      });
      // Each job's effect exists; the released ones ran again (their first run was not charged).
      expect(counted).toMatchObject({
        effects: JOBS,
        duplicates: CONCURRENCY,
        lost: 0,
        byStatus: { succeeded: JOBS },
      });
    });
  }

  it('uncooperative handlers past the grace period: SIGKILL strands nothing beyond the visibility timeout', async () => {
    const queue = 'graceful-killed';
    const graceMs = 1000;
    const { worker, ids, started } = await busyWorker(queue, false, 30_000);
    // The surviving replica takes the queued jobs while the busy one holds its four.
    const survivor = await t.startWorker({
      queues: [queue],
      concurrency: JOBS,
      visibilityTimeoutMs: VISIBILITY_MS,
      sweepIntervalMs: SWEEP_MS,
    });
    survivor.autoFinish();
    await waitFor(
      async () => (await jobsOf(ids)).filter((j) => j.status === 'succeeded').length === JOBS - CONCURRENCY,
      20_000,
      'the survivor to run the queued jobs',
      () => jobsOf(ids),
    );

    const stop = await orchestratorStop(worker, graceMs);
    expect(stop.signal).toBe('SIGKILL');
    const killedAt = stop.killedAt!;
    await waitFor(
      async () => (await jobsOf(ids)).every((j) => j.locked_by !== worker.workerId),
      30_000,
      'the killed worker’s jobs to be reclaimed',
      () => jobsOf(ids),
    );
    const reclaimedMs = Date.now() - killedAt;
    await t.settle(ids, 30_000);
    const state = await jobsOf(ids);
    expect(state.map((j) => j.status)).toEqual(ids.map(() => 'succeeded'));
    // The four it held were charged once for the crash and succeeded on their second attempt.
    expect(state.filter((j) => started.includes(j.id)).map((j) => j.attempts)).toEqual(started.map(() => 2));
    expect((await deliveriesBy(worker.pid, ids)).map((d) => d.job_id)).toEqual(started);
    const counted = await t.tally(ids);
    tallyFigure('graceful-shutdown-killed', counted, {
      kills: 1,
      restarts: 0,
      stranded: started.length,
      reclaimedMs,
      claimedAfterSigterm: (await deliveriesBy(worker.pid, ids)).length - CONCURRENCY,
    });
    expect(counted).toMatchObject({
      effects: JOBS,
      duplicates: CONCURRENCY,
      lost: 0,
      sameAttemptTwice: 0,
      finalAttemptMissing: 0,
      byStatus: { succeeded: JOBS },
    });
    // The survivor's sweeper is what gave them back (reclaimedMs is reported, not asserted: a
    // loaded machine may delay a sweep, and it changes nothing that is true of the jobs).
    const swept = survivor.reported('sweep');
    expect(swept.reduce((n, m) => n + m.requeued, 0)).toBe(CONCURRENCY);
    expect(swept.reduce((n, m) => n + m.dead, 0)).toBe(0);
    await survivor.shutdown();
  });
});
