/**
 * Cancel storm: worker processes drain thousands of short jobs — some honour
 * their AbortSignal, some ignore it — while the parent fires cancels at random
 * subsets (by ids, kind and queue; queued and running) and SIGKILLs and
 * replaces workers. The ledger knows exactly which jobs each cancel hit (see
 * cancel-ledger.ts). In the end every job is `succeeded` or `cancelled`, and
 * `cancelled` exactly when a cancel hit it; a hit job is never claimed again
 * and no attempt of it runs past its recorded attempts; no job both succeeded
 * and was cancelled; cancels of finished jobs change nothing.
 *
 * Replay a run's choices with `CHAOS_SEED=<the printed seed>`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { CancelFilter } from '../../src/index.js';
import { waitFor } from '../support/database.js';
import { CancelLedger } from './support/cancel-ledger.js';
import { effectTables, figure, useChaosDatabase, waitUntilSettled, workerConfig } from './support/cluster.js';
import { enqueueInBatches } from './support/enqueue-batches.js';
import type { SleepPayload } from './support/protocol.js';
import { chaosSeed, SeededRandom } from './support/random.js';
import { WorkerFleet } from './support/worker-fleet.js';

const t = useChaosDatabase();

const QUEUES = ['storm-a', 'storm-b'];
/** `coop_*` handlers honour their signal; `stubborn_*` ones sleep on after a cancel. */
const KINDS = ['coop_1', 'coop_2', 'stubborn_1', 'stubborn_2'];
const JOB_COUNT = 3000;
const WORKER_COUNT = 3;
/** Kills when this share of the jobs is finished. */
const KILL_AT = [0.15, 0.4, 0.65];
/**
 * After a kill the storm calms down for a while (a cancel now and then), so
 * that most jobs the dead worker held are reclaimed by the sweeper and run
 * again rather than cancelled.
 */
const CALM_MS = 4000;
/** Most cancels that wipe every queued job of a kind in a queue. */
const MAX_WIPES = 2;

function enqueue(random: SeededRandom): Promise<string[]> {
  return enqueueInBatches(t.skiplock, JOB_COUNT, () => {
    const kind = random.pick(KINDS);
    // Mostly a few ms; some long enough to be caught running.
    const ms = random.chance(0.15) ? random.int(100, 400) : random.int(2, 20);
    const payload: SleepPayload = { ms, cooperative: kind.startsWith('coop') };
    return { kind, payload, queue: random.pick(QUEUES) };
  });
}

async function runningIds(): Promise<string[]> {
  const rows = await t.query<{ id: string }>(
    `SELECT id::text FROM ${t.jobs} WHERE status = 'running' ORDER BY id`,
  );
  return rows.map((r) => r.id);
}

async function finishedIds(): Promise<string[]> {
  const rows = await t.query<{ id: string }>(
    `SELECT id::text FROM ${t.jobs} WHERE status IN ('succeeded', 'cancelled') ORDER BY id`,
  );
  return rows.map((r) => r.id);
}

/** One lane of the storm: random cancels until `over()`. */
async function stormLane(
  random: SeededRandom,
  ledger: CancelLedger,
  ids: string[],
  wipes: { left: number },
  over: () => boolean,
  calm: () => boolean,
): Promise<void> {
  const pause = () => sleep(calm() ? random.int(200, 400) : random.int(5, 30));
  while (!over()) {
    const r = random.next();
    let filter: Omit<CancelFilter, 'client'>;
    if (r < 0.35) {
      filter = { ids: random.sample(ids, random.int(1, 8)) };
      if (random.chance(0.25)) filter.kind = random.pick(KINDS);
    } else if (r < 0.55) {
      const running = await runningIds();
      filter =
        running.length > 0
          ? { ids: random.sample(running, random.int(1, 4)), status: 'running' }
          : { ids: random.sample(ids, 2) };
    } else if (r < 0.6) {
      filter = { kind: random.pick(KINDS), status: 'running' };
    } else if (r < 0.63) {
      filter = { queue: random.pick(QUEUES), status: 'running' };
    } else if (r < 0.8) {
      filter = { ids: random.sample(ids, random.int(1, 8)), status: 'queued' };
    } else if (r < 0.82 && wipes.left > 0) {
      wipes.left--;
      filter = { kind: random.pick(KINDS), queue: random.pick(QUEUES), status: 'queued' };
    } else {
      const finished = random.sample(await finishedIds(), random.int(1, 20));
      if (finished.length > 0) await ledger.cancelFinished('storm', { ids: finished }, finished);
      await pause();
      continue;
    }
    await ledger.fire(filter);
    await pause();
  }
}

describe('chaos: cancel storm', () => {
  it('cancels at random subsets while workers drain and die: exactly the hit jobs end cancelled', async () => {
    const seed = chaosSeed();
    console.log(`[chaos] cancel-storm: seed=${seed} (replay with CHAOS_SEED=${seed})`);
    const random = new SeededRandom(seed);
    const fleet = new WorkerFleet(t, () =>
      workerConfig(t, { queues: QUEUES, concurrency: 8, sleepKinds: KINDS }),
    );
    await fleet.start(WORKER_COUNT);
    const ids = await enqueue(random);
    const ledger = new CancelLedger(t.skiplock, t.db.pool, t.jobs);

    const finishedCount = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${t.jobs} WHERE status NOT IN ('queued', 'running')`,
        )
      )[0]!.n;
    let over = false;
    let calmUntil = 0;
    const wipes = { left: MAX_WIPES };
    const lanes = [0, 1].map((lane) =>
      stormLane(
        new SeededRandom(seed + 1 + lane),
        ledger,
        ids,
        wipes,
        () => over,
        () => performance.now() < calmUntil,
      ),
    );
    let kills = 0;
    let restarts = 0;
    try {
      for (const share of KILL_AT) {
        const target = Math.floor(JOB_COUNT * share);
        await waitFor(async () => (await finishedCount()) >= target, 60_000, `${target} finished jobs`);
        const victim = random.pick(fleet.busy());
        calmUntil = performance.now() + CALM_MS;
        await fleet.killAndReplace(victim);
        kills++;
        restarts++;
      }
      await waitUntilSettled(t.db.pool, t.schema, ids, 60_000);
    } finally {
      over = true;
      await Promise.all(lanes);
    }

    // Cancels of finished jobs, by every filter, change nothing.
    await ledger.cancelFinished('all ids', { ids }, ids);
    await ledger.cancelFinished('all kinds', { kind: KINDS }, ids);
    await ledger.cancelFinished('all queues', { queue: QUEUES }, ids);

    const jobs = await t.query<{
      id: string;
      status: string;
      attempts: number;
      lease_seq: string;
      swept: boolean;
    }>(
      `SELECT id::text, status, attempts, lease_seq::text,
              last_error IS NOT DISTINCT FROM 'reclaimed: visibility timeout' AS swept
       FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
      [ids],
    );
    const deliveries = await t.query<{ job_id: string; attempt: number }>(
      `SELECT job_id::text, attempt FROM ${effectTables(t.schema).deliveries}`,
    );
    const attemptsOf = new Map<string, number[]>();
    for (const d of deliveries) attemptsOf.set(d.job_id, [...(attemptsOf.get(d.job_id) ?? []), d.attempt]);
    const successEvents = new Set(fleet.spawned.flatMap((p) => p.reported('job:success').map((m) => m.id)));
    const cancelEvents = new Set(fleet.spawned.flatMap((p) => p.reported('job:cancelled').map((m) => m.id)));

    const byStatus: Record<string, number> = {};
    const problems = {
      hitNotCancelled: [] as string[],
      cancelledNotHit: [] as string[],
      claimedAfterHit: [] as string[],
      hitAfterCancelled: [] as string[],
      attemptsMoved: [] as string[],
      attemptPastRecorded: [] as string[],
      sameAttemptTwice: [] as string[],
      succeededUndelivered: [] as string[],
      succeededAndCancelled: [] as string[],
    };
    let duplicates = 0;
    let effects = 0;
    let succeededAfterCancelRequest = 0;
    let hitRunning = 0;
    for (const job of jobs) {
      byStatus[job.status] = (byStatus[job.status] ?? 0) + 1;
      const hits = ledger.hits.get(job.id);
      const attempts = attemptsOf.get(job.id) ?? [];
      if (attempts.length > 0) effects++;
      if (new Set(attempts).size !== attempts.length) problems.sameAttemptTwice.push(job.id);
      if (!hits) {
        if (job.status === 'cancelled') problems.cancelledNotHit.push(job.id);
        if (job.status === 'succeeded') {
          duplicates += Math.max(0, attempts.length - 1);
          if (!attempts.includes(job.attempts)) problems.succeededUndelivered.push(job.id);
          if (ledger.named.has(job.id)) succeededAfterCancelRequest++;
        }
        if (cancelEvents.has(job.id)) problems.succeededAndCancelled.push(job.id);
        continue;
      }
      if (job.status !== 'cancelled') problems.hitNotCancelled.push(job.id);
      if (successEvents.has(job.id)) problems.succeededAndCancelled.push(job.id);
      const first = hits[0]!;
      if (first.status === 'running') hitRunning++;
      // Once hit, a job is never claimed again: every hit and the final row share the lease.
      if (hits.some((h) => h.leaseSeq !== job.lease_seq)) problems.claimedAfterHit.push(job.id);
      // A queued job a cancel hit is finished: no later cancel can hit it.
      if (hits.length > 1 && hits.some((h) => h.status === 'cancelled'))
        problems.hitAfterCancelled.push(job.id);
      // Attempts stay as hit; a job given back from a prefetch buffer unstarted is not charged its claim.
      const allowed = first.status === 'running' ? [first.attempts, first.attempts - 1] : [first.attempts];
      if (!allowed.includes(job.attempts)) problems.attemptsMoved.push(job.id);
      if (attempts.some((a) => a > job.attempts)) problems.attemptPastRecorded.push(job.id);
    }
    const lost = (byStatus.queued ?? 0) + (byStatus.running ?? 0);
    const reclaimed = jobs.filter((j) => j.attempts > 1).length;
    figure('cancel-storm', {
      jobs: jobs.length,
      cancelled: byStatus.cancelled ?? 0,
      succeeded: byStatus.succeeded ?? 0,
      succeededAfterCancelRequest,
      duplicates,
      lost,
      kills,
      restarts,
      effects,
      cancelCalls: ledger.calls,
      hitJobs: ledger.hits.size,
      hitRunning,
      finishedChecks: ledger.finishedChecks,
      reclaimed,
      swept: jobs.filter((j) => j.swept).length,
      seed,
    });
    expect(jobs.length).toBe(JOB_COUNT);
    expect(kills).toBe(KILL_AT.length);
    expect(ledger.countMismatches).toEqual([]);
    expect(ledger.slipped).toEqual([]);
    expect(ledger.finishedChanged).toEqual([]);
    expect(problems).toEqual({
      hitNotCancelled: [],
      cancelledNotHit: [],
      claimedAfterHit: [],
      hitAfterCancelled: [],
      attemptsMoved: [],
      attemptPastRecorded: [],
      sameAttemptTwice: [],
      succeededUndelivered: [],
      succeededAndCancelled: [],
    });
    expect(byStatus).toEqual({ succeeded: JOB_COUNT - ledger.hits.size, cancelled: ledger.hits.size });
    expect(lost).toBe(0);
    // A re-run only happens to a job whose worker died holding it.
    expect(duplicates).toBeLessThanOrEqual(reclaimed);
    // The storm did what it is for: it hit queued and running jobs, and left some to succeed.
    expect(hitRunning).toBeGreaterThan(0);
    expect(ledger.hits.size - hitRunning).toBeGreaterThan(0);
    expect(byStatus.succeeded ?? 0).toBeGreaterThan(0);
    await Promise.all(fleet.alive.map((p) => p.shutdown()));
  });
});
