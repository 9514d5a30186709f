/**
 * Pause storm: worker processes drain jobs of three queues while the parent
 * pauses and resumes random queues many times. A trigger on the test's jobs
 * table records every claim (queued → running) with the claim's transaction
 * start and the moment its row changed, and the handlers record when they
 * started. Then:
 *
 * - no claim of a queue saw it paused: none started after a pause of it had
 *   committed and changed its row before the matching resume was sent (exact;
 *   the claim skips paused queues from the pause's commit on);
 * - no job of a queue started more than {@link START_GRACE_MS} after a pause of
 *   it committed and before the matching resume (workers give back what their
 *   prefetch buffer holds of the queue when the pause reaches them);
 * - pause and resume return whether they changed the queue;
 * - after the final resume every job succeeds, each exactly once unless a
 *   starved worker lost its lease to the sweeper (no kills here, so normally none).
 *
 * The parent's clock and the workers' are the machine's; the database's too.
 * Replay a run's choices with `CHAOS_SEED=<the printed seed>`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { NO_LIMITS } from '../support/queue-limits.js';
import { tableIn } from '../support/sql.js';
import { effectTables, figure, useChaosDatabase, type WorkerProcess } from './support/cluster.js';
import { enqueueInBatches } from './support/enqueue-batches.js';
import type { SleepPayload } from './support/protocol.js';
import { chaosSeed, SeededRandom } from './support/random.js';

const t = useChaosDatabase();

const QUEUES = ['pause-a', 'pause-b', 'pause-c'];
const KIND = 'nap';
const JOB_COUNT = 4000;
const WORKER_COUNT = 3;
/** The storm toggles at least this often, and stops after the jobs drained or at most this often. */
const MIN_TOGGLES = 30;
const MAX_TOGGLES = 400;
/** How long after a pause committed a job of the queue may still start (the documented "about a second"). */
const START_GRACE_MS = 1000;

/** A stretch in which a queue was paused: from just after its pause returned to just before its resume was sent (epoch ms). */
interface Window {
  queue: string;
  from: number;
  to: number;
}

/** Records every claim of the test's jobs: when its transaction started and when the row changed. */
async function recordClaims(schema: string): Promise<string> {
  const claims = tableIn(schema, 'chaos_claims');
  const fn = tableIn(schema, 'chaos_record_claim');
  await t.db.pool.query(`
    CREATE TABLE ${claims} (job_id bigint NOT NULL, queue text NOT NULL, tx_at timestamptz NOT NULL,
                            at timestamptz NOT NULL);
    CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${claims} (job_id, queue, tx_at, at) VALUES (NEW.id, NEW.queue, now(), clock_timestamp());
      RETURN NULL;
    END $$;
    CREATE TRIGGER chaos_claims AFTER UPDATE ON ${t.jobs}
      FOR EACH ROW WHEN (OLD.status = 'queued' AND NEW.status = 'running') EXECUTE FUNCTION ${fn}();
  `);
  return claims;
}

function enqueue(random: SeededRandom): Promise<string[]> {
  return enqueueInBatches(t.skiplock, JOB_COUNT, () => {
    const payload: SleepPayload = { ms: random.int(5, 30), cooperative: true };
    return { kind: KIND, payload, queue: random.pick(QUEUES) };
  });
}

describe('chaos: pause storm', () => {
  it('pauses and resumes random queues while workers drain them: nothing of a paused queue starts', async () => {
    const seed = chaosSeed();
    console.log(`[chaos] pause-storm: seed=${seed} (replay with CHAOS_SEED=${seed})`);
    const random = new SeededRandom(seed);
    const claims = await recordClaims(t.schema);
    const workers: WorkerProcess[] = [];
    for (let i = 0; i < WORKER_COUNT; i++) {
      workers.push(t.spawnWorker({ queues: QUEUES, concurrency: 4, sleepKinds: [KIND] }));
    }
    await Promise.all(workers.map((p) => p.ready()));
    const ids = await enqueue(random);

    const unfinished = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${t.jobs} WHERE status IN ('queued', 'running')`,
        )
      )[0]!.n;
    const pausedSince = new Map<string, number>();
    const windows: Window[] = [];
    const wrongAnswers: string[] = [];
    let pauses = 0;
    let resumes = 0;
    let toggles = 0;
    const pause = async (queue: string) => {
      const changed = await t.skiplock.pauseQueue(queue);
      // Date.now() rounds down: + 1 is surely after the pause committed.
      const at = Date.now() + 1;
      if (changed !== !pausedSince.has(queue)) wrongAnswers.push(`pause ${queue} → ${changed}`);
      if (!pausedSince.has(queue)) {
        pausedSince.set(queue, at);
        pauses++;
      }
    };
    const resume = async (queue: string) => {
      const since = pausedSince.get(queue);
      const at = Date.now();
      const changed = await t.skiplock.resumeQueue(queue);
      if (changed !== (since !== undefined)) wrongAnswers.push(`resume ${queue} → ${changed}`);
      if (since !== undefined) {
        windows.push({ queue, from: since, to: at });
        pausedSince.delete(queue);
        resumes++;
      }
    };

    while (toggles < MAX_TOGGLES && (toggles < MIN_TOGGLES || (await unfinished()) > 0)) {
      const queue = random.pick(QUEUES);
      const paused = pausedSince.has(queue);
      // Now and then the call that changes nothing: pause a paused queue, resume a running one.
      const redundant = random.chance(0.1);
      if (paused !== redundant) await resume(queue);
      else await pause(queue);
      toggles++;
      await sleep(random.int(20, 250));
    }
    const drainedDuringStorm = JOB_COUNT - (await unfinished());
    for (const queue of [...pausedSince.keys()]) await resume(queue);
    await t.settle(ids, 60_000, 'every job to finish after the final resume');

    const claimedWhilePaused = await t.query<{ job_id: string; queue: string }>(
      `SELECT c.job_id::text, c.queue, extract(epoch FROM c.tx_at) * 1000 - w.from_ms AS after_pause_ms,
              w.to_ms - extract(epoch FROM c.at) * 1000 AS before_resume_ms
       FROM ${claims} c JOIN unnest($1::text[], $2::float8[], $3::float8[]) w (queue, from_ms, to_ms)
         ON w.queue = c.queue
       WHERE extract(epoch FROM c.tx_at) * 1000 > w.from_ms AND extract(epoch FROM c.at) * 1000 < w.to_ms`,
      [windows.map((w) => w.queue), windows.map((w) => w.from), windows.map((w) => w.to)],
    );
    const starts = await t.query<{ job_id: string; queue: string; started_ms: number }>(
      `SELECT d.job_id::text, j.queue, extract(epoch FROM d.started_at)::float8 * 1000 AS started_ms
       FROM ${effectTables(t.schema).deliveries} d JOIN ${t.jobs} j ON j.id = d.job_id`,
    );
    let startedWhilePaused = 0;
    let startedInGrace = 0;
    let maxStartAfterPauseMs = 0;
    for (const s of starts) {
      for (const w of windows) {
        if (w.queue !== s.queue || s.started_ms <= w.from || s.started_ms >= w.to) continue;
        const late = s.started_ms - w.from;
        maxStartAfterPauseMs = Math.max(maxStartAfterPauseMs, Math.round(late));
        if (late > START_GRACE_MS) startedWhilePaused++;
        else startedInGrace++;
      }
    }
    const counted = await t.tally(ids);
    const [claimCount] = await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${claims}`);
    // A lease lost to a starved worker process (no kills here) is the only way to a second delivery.
    const [swept] = await t.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${t.jobs} WHERE last_error = 'reclaimed: visibility timeout'`,
    );
    figure('pause-storm', {
      jobs: counted.jobs,
      pauses,
      resumes,
      toggles,
      drainedDuringStorm,
      startedWhilePaused,
      claimedWhilePaused: claimedWhilePaused.length,
      startedInGrace,
      maxStartAfterPauseMs,
      lost: counted.lost,
      duplicates: counted.duplicates,
      effects: counted.effects,
      claims: claimCount!.n,
      swept: swept!.n,
      kills: 0,
      restarts: 0,
      seed,
    });
    expect(wrongAnswers).toEqual([]);
    expect(pauses).toBeGreaterThanOrEqual(10);
    expect(resumes).toBe(pauses);
    expect(claimedWhilePaused).toEqual([]);
    expect(startedWhilePaused).toBe(0);
    expect(counted.duplicates).toBeLessThanOrEqual(swept!.n);
    expect(counted).toMatchObject({
      effects: JOB_COUNT,
      lost: 0,
      sameAttemptTwice: 0,
      finalAttemptMissing: 0,
      byStatus: { succeeded: JOB_COUNT },
    });
    expect(await t.skiplock.queues()).toEqual(
      QUEUES.map((name) => ({
        name,
        paused: false,
        pausedAt: null,
        queued: 0,
        running: 0,
        limits: NO_LIMITS,
      })),
    );
    await Promise.all(workers.map((p) => p.shutdown()));
    for (const p of workers) expect(p.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });
});
