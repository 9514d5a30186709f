import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Job, JobTimeoutError, ShutdownError, type Skiplock } from '../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { recordThrown } from './support/thrown.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

/** Run times of simulated jobs: longer than the 400 ms visibility timeout, and a short one. */
const LONG_JOB_MS = 1500;
const SHORT_JOB_MS = 200;

const base = { handleSignals: false, pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

/** A promise with its resolver, for handlers the test releases by hand. */
function gate<T = void>() {
  let open!: (value: T) => void;
  const opened = new Promise<T>((resolve) => {
    open = resolve;
  });
  return { open, opened };
}

/** Sweeps now; retries while a worker's own sweep holds the lock. */
async function sweepNow() {
  return waitFor(
    async () => {
      const result = await skiplock.sweep();
      return result.locked ? result : undefined;
    },
    5000,
    'the sweep lock',
  );
}

async function row(id: string) {
  const [r] = await db.query(`SELECT status, attempts, locked_by, last_error FROM ${db.jobs} WHERE id = $1`, [
    id,
  ]);
  return r;
}

describe('lease', () => {
  it('a late result from a reclaimed lease changes nothing', async () => {
    const release = gate();
    const started = gate<Job>();
    const a = skiplock.worker({
      ...base,
      concurrency: 1, // frozen on its one job: it cannot claim the job again itself
      queues: ['stale'],
      onSuccess: 'keep',
      handlers: {
        work: async (job) => {
          started.open(job);
          await release.opened;
        },
      },
    });
    await a.start();
    const job = await skiplock.enqueue('work', {}, { queue: 'stale' });
    await started.opened;
    // A froze: its lease ages past the visibility timeout and the sweeper reclaims it.
    await db.query(`UPDATE ${db.jobs} SET locked_at = now() - interval '1 hour' WHERE id = $1`, [job.id]);
    await sweepNow();
    expect(await row(job.id)).toMatchObject({
      status: 'queued',
      attempts: 1,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });

    const b = skiplock.worker({
      ...base,
      queues: ['stale'],
      handlers: {
        work: () => {
          throw new Error('second attempt failed');
        },
      },
    });
    const failed = nextEvent(b, 'job:failure');
    await b.start();
    const [, , outcome] = await failed;
    expect(outcome.status).toBe('queued');
    const afterB = await row(job.id);
    expect(afterB).toMatchObject({ status: 'queued', attempts: 2, locked_by: null });
    expect(afterB?.last_error).toMatch(/second attempt failed/);

    // A wakes up and reports success for attempt 1: fenced out.
    const stale = nextEvent(a, 'job:stale');
    release.open();
    const [staleJob] = await stale;
    expect(staleJob.id).toBe(job.id);
    expect(await row(job.id)).toEqual(afterB);
    await Promise.all([a.stop(), b.stop()]);
  });

  it('a stale lease from before a requeue cannot write over the same worker’s new lease of the same attempt', async () => {
    const gates = [gate(), gate()];
    const started: number[] = [];
    const worker = skiplock.worker({
      ...base,
      queues: ['requeued'],
      concurrency: 2,
      onSuccess: 'keep',
      handlers: {
        once: async () => {
          const run = started.length;
          started.push(run);
          await gates[run]!.opened;
          if (run === 0) throw new Error('late failure of the first lease');
        },
      },
    });
    await worker.start();
    const job = await skiplock.enqueue('once', {}, { queue: 'requeued', maxAttempts: 1 });
    await waitFor(() => started.length === 1, 5000, 'the first run');
    await db.query(`UPDATE ${db.jobs} SET locked_at = now() - interval '1 hour' WHERE id = $1`, [job.id]);
    await sweepNow();
    expect(await row(job.id)).toMatchObject({ status: 'dead', attempts: 1 });
    expect(await skiplock.requeue({ ids: [job.id] })).toBe(1);
    // The same worker claims it again: attempt 1 again, by the same worker id.
    await waitFor(() => started.length === 2, 5000, 'the run after requeue');
    expect(await row(job.id)).toMatchObject({ status: 'running', attempts: 1, locked_by: worker.id });
    const stale = nextEvent(worker, 'job:stale');
    gates[0]!.open();
    await stale;
    expect(await row(job.id)).toMatchObject({ status: 'running', attempts: 1, last_error: null });
    const succeeded = nextEvent(worker, 'job:success');
    gates[1]!.open();
    await succeeded;
    expect(await row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
    await worker.stop();
  });

  it('heartbeats keep a long job leased past the visibility timeout', async () => {
    const sweeps: unknown[] = [];
    const worker = skiplock.worker({
      ...base,
      queues: ['long'],
      visibilityTimeoutMs: 400,
      heartbeatIntervalMs: 50,
      sweepIntervalMs: 50,
      onSuccess: 'keep',
      // The job itself takes longer than the visibility timeout (a handler's run time, not a wait in the test).
      handlers: { long: () => sleep(LONG_JOB_MS) },
    });
    worker.on('worker:sweep', (s) => sweeps.push(s));
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await skiplock.enqueue('long', {}, { queue: 'long' });
    await succeeded;
    expect(await row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(sweeps).toEqual([]);
    await worker.stop();
  });

  it('a heartbeat that finds its lease reclaimed aborts the handler', async () => {
    const started = gate<AbortSignal>();
    const worker = skiplock.worker({
      ...base,
      concurrency: 1,
      shutdownTimeoutMs: 100,
      queues: ['lost'],
      visibilityTimeoutMs: 60_000,
      heartbeatIntervalMs: 50,
      handlers: {
        lost: (_, { signal }) => {
          started.open(signal);
          return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        },
      },
    });
    await worker.start();
    const job = await skiplock.enqueue('lost', {}, { queue: 'lost' });
    const signal = await started.opened;
    const lost = nextEvent(worker, 'lease:lost');
    const stale = nextEvent(worker, 'job:stale');
    // A 1 ms visibility timeout: heartbeats every 50 ms cannot keep this lease alive.
    await db.query(`UPDATE ${db.jobs} SET visibility_timeout_ms = 1 WHERE id = $1`, [job.id]);
    await sweepNow();
    const [lostJob] = await lost;
    expect(lostJob.id).toBe(job.id);
    expect(signal.aborted).toBe(true);
    expect((signal.reason as Error).name).toBe('LeaseLostError');
    await stale;
    // Stopping gives back any new attempt uncharged, so the row is the sweeper's.
    await worker.stop();
    expect(await row(job.id)).toMatchObject({ status: 'queued', attempts: 1, locked_by: null });
  });
});

describe('sweeper', () => {
  it('sends a dead lease out of attempts to the dead letter', async () => {
    const [inserted] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, queue, status, attempts, max_attempts, locked_at)
       VALUES ('poison', 'sweep', 'running', 3, 3, now() - interval '10 minutes') RETURNING id`,
    );
    expect(await sweepNow()).toEqual({ locked: true, requeued: 0, dead: 1 });
    expect(await row(inserted!.id)).toMatchObject({
      status: 'dead',
      attempts: 3,
      last_error: 'reclaimed: visibility timeout',
    });
  });

  it('leaves fresh leases alone and honours each job’s visibility timeout', async () => {
    const [fresh] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, status, attempts, locked_at, visibility_timeout_ms)
       VALUES ('fresh', 'running', 1, now() - interval '2 seconds', 60000) RETURNING id`,
    );
    const [expired] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, status, attempts, locked_at, visibility_timeout_ms)
       VALUES ('expired', 'running', 1, now() - interval '2 seconds', 1000) RETURNING id`,
    );
    expect(await sweepNow()).toEqual({ locked: true, requeued: 1, dead: 0 });
    expect((await row(fresh!.id))?.status).toBe('running');
    expect((await row(expired!.id))?.status).toBe('queued');
    await db.query(`DELETE FROM ${db.jobs} WHERE id = $1`, [fresh!.id]);
  });

  it('runs one sweep at a time: skips while another process holds the lock', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
        `skiplock:sweep:${skiplock.schema}`,
      ]);
      expect(await skiplock.sweep()).toEqual({ locked: false, requeued: 0, dead: 0 });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect((await sweepNow())?.locked).toBe(true);
  });
});

describe('graceful stop', () => {
  it('lets running handlers finish within the deadline', async () => {
    const started = gate();
    const worker = skiplock.worker({
      ...base,
      queues: ['finish'],
      onSuccess: 'keep',
      shutdownTimeoutMs: 10_000,
      handlers: {
        finish: async () => {
          started.open();
          await sleep(SHORT_JOB_MS); // the job's own run time
        },
      },
    });
    await worker.start();
    const job = await skiplock.enqueue('finish', {}, { queue: 'finish' });
    await started.opened;
    await worker.stop();
    expect(await row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  it('aborts handlers past the deadline and gives their jobs back without charging the attempt', async () => {
    const started = gate<AbortSignal>();
    const worker = skiplock.worker({
      ...base,
      queues: ['abort'],
      shutdownTimeoutMs: 100,
      handlers: {
        stuck: (_, { signal }) => {
          started.open(signal);
          return new Promise(() => {}); // uncooperative: never settles
        },
      },
    });
    const released: Job[] = [];
    worker.on('job:released', (j) => released.push(j));
    await worker.start();
    const job = await skiplock.enqueue('stuck', {}, { queue: 'abort' });
    const signal = await started.opened;
    await worker.stop();
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(ShutdownError);
    expect(released.map((j) => j.id)).toEqual([job.id]);
    expect(await row(job.id)).toMatchObject({ status: 'queued', attempts: 0, locked_by: null });
  });

  it('claims nothing after stop', async () => {
    let ran = 0;
    const worker = skiplock.worker({ ...base, queues: ['after-stop'], handlers: { x: () => void ran++ } });
    await worker.start();
    await worker.stop();
    const job = await skiplock.enqueue('x', {}, { queue: 'after-stop' });
    // The LISTEN connection is closed and the loops ended: the job stays queued.
    expect(await row(job.id)).toMatchObject({ status: 'queued', attempts: 0 });
    expect(ran).toBe(0);
    expect(worker.activeCount).toBe(0);
  });
});

describe('failures', () => {
  it('records a readable last_error for anything thrown, and keeps the worker running', async () => {
    const thrown: Record<string, unknown> = {
      str: 'plain string',
      undef: undefined,
      obj: { code: 42, detail: 'object' },
      nul: new Error('has \u0000 NUL'),
    };
    const { worker, byKey } = await recordThrown(skiplock, db, 'throws', thrown);
    expect(byKey.str?.last_error).toBe('plain string');
    expect(byKey.undef?.last_error).toBe('handler threw undefined (not an Error)');
    expect(byKey.obj?.last_error).toBe("handler threw a non-Error value: { code: 42, detail: 'object' }");
    expect(byKey.nul?.last_error).toMatch(/^Error: has \\u0000 NUL/);
    for (const e of Object.values(byKey)) expect(e).toMatchObject({ status: 'queued', attempts: 1 });
    await worker.stop();
  });

  it('never claims a job of a kind it has no handler for; a worker that has it does', async () => {
    const old = skiplock.worker({ ...base, queues: ['unknown'], handlers: { known: () => {} } });
    await old.start();
    const job = await skiplock.enqueue('mystery', {}, { queue: 'unknown' });
    // A later job of a known kind runs, so the claim has passed over the unknown one.
    const known = nextEvent(old, 'job:success');
    await skiplock.enqueue('known', {}, { queue: 'unknown' });
    await known;
    expect(await row(job.id)).toMatchObject({ status: 'queued', attempts: 0 });
    // A worker of a newer version, with the handler, takes it on its first attempt.
    const ran: number[] = [];
    const fresh = skiplock.worker({
      ...base,
      queues: ['unknown'],
      onSuccess: 'keep',
      handlers: { mystery: (j) => void ran.push(j.attempts) },
    });
    const done = nextEvent(fresh, 'job:success');
    await fresh.start();
    expect((await done)[0].id).toBe(job.id);
    expect(ran).toEqual([1]);
    await old.stop();
    await fresh.stop();
  });

  it('cuts off a handler that never settles at jobTimeoutMs and frees its slot', async () => {
    const ran: string[] = [];
    const worker = skiplock.worker({
      ...base,
      queues: ['timeout'],
      concurrency: 1,
      jobTimeoutMs: 100,
      handlers: {
        hang: () => new Promise(() => {}),
        quick: () => void ran.push('quick'),
      },
    });
    await worker.start();
    const failed = nextEvent(worker, 'job:failure');
    const hung = await skiplock.enqueue('hang', {}, { queue: 'timeout', priority: 10 });
    await skiplock.enqueue('quick', {}, { queue: 'timeout' });
    const [, thrown, outcome] = await failed;
    expect(thrown).toBeInstanceOf(JobTimeoutError);
    expect(outcome.lastError).toMatch(/^JobTimeoutError: job timed out after 100 ms/);
    expect(outcome.status).toBe('queued');
    await waitFor(() => ran.length === 1, 5000, 'the quick job after the timeout');
    expect(await row(hung.id)).toMatchObject({ status: 'queued', attempts: 1 });
    await worker.stop();
  });
});

describe('success policies', () => {
  it.each(['keep', 'archive'] as const)('%s', async (onSuccess) => {
    const queue = `policy-${onSuccess}`;
    const worker = skiplock.worker({ ...base, queues: [queue], onSuccess, handlers: { p: () => {} } });
    await worker.start();
    const succeeded = nextEvent(worker, 'job:success');
    const job = await skiplock.enqueue('p', { v: onSuccess }, { queue });
    await succeeded;
    const hot = await row(job.id);
    const [archived] = await db.query(
      `SELECT status, attempts, payload, finished_at IS NOT NULL AS finished FROM ${db.jobs.replace(/jobs$/, 'jobs_archive')} WHERE id = $1`,
      [job.id],
    );
    if (onSuccess === 'keep') {
      expect(hot).toMatchObject({ status: 'succeeded', attempts: 1, locked_by: null });
      expect(archived).toBeUndefined();
    } else {
      expect(hot).toBeUndefined();
      expect(archived).toEqual({
        status: 'succeeded',
        attempts: 1,
        payload: { v: 'archive' },
        finished: true,
      });
    }
    await worker.stop();
  });
});
