/**
 * The worker's life cycle under faults: a stop that never outlives its
 * deadline, stop() called from a handler, listeners that throw, result writes
 * whose answer is lost, and a start that fails fast when the database cannot
 * be used.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { JobQueries } from '../src/db/queries/jobs.js';
import { DatabaseError, SchemaVersionError, Skiplock as SkiplockClass, type Worker } from '../src/index.js';
import { Completer } from '../src/worker/completer.js';
import { withClient } from './support/client.js';
import { TEST_SCHEMA, urlFor, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();
const workers: Worker[] = [];

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

const base = { handleSignals: false, pollIntervalMs: 200 } as const;

function track(worker: Worker): Worker {
  workers.push(worker);
  return worker;
}

describe('stop', () => {
  it('resolves within shutdownTimeoutMs + a few seconds while another session holds the table locked', async () => {
    const worker = track(
      skiplock.worker({
        ...base,
        queues: ['lc-lock'],
        shutdownTimeoutMs: 1000,
        heartbeatIntervalMs: 100,
        handlers: { k: () => {} },
      }),
    );
    await worker.start();
    await withClient(db.url, async (locker) => {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${db.jobs} IN ACCESS EXCLUSIVE MODE`);
      // A job enqueued now waits behind the lock; so does the worker's next claim.
      const blocked = new SkiplockClass({ connectionString: db.url, schema: TEST_SCHEMA });
      const pending = blocked.enqueue('k', {}, { queue: 'lc-lock' }).catch(() => undefined);
      await waitFor(
        async () =>
          (
            await db.query<{ n: number }>(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
          )[0]!.n > 0,
        10_000,
        'a statement waiting on the lock',
      );
      const startedAt = performance.now();
      await worker.stop();
      const stopMs = performance.now() - startedAt;
      // The lock is still held: stop did not wait for it.
      expect((await locker.query('SELECT 1 AS still')).rows).toEqual([{ still: 1 }]);
      expect(stopMs).toBeLessThan(1000 + 3000 + 2000);
      await locker.query('ROLLBACK');
      await pending;
      await blocked.close();
    });
  });

  it('called from a handler does not wait for that handler; the job ends by its result', async () => {
    const worker: Worker = track(
      skiplock.worker({
        ...base,
        queues: ['lc-self-stop'],
        shutdownTimeoutMs: 20_000,
        onSuccess: 'keep',
        handlers: {
          quit: async () => {
            await worker.stop();
          },
          quitThenFail: async () => {
            await worker.stop();
            throw new Error('failed after stop');
          },
        },
      }),
    );
    await worker.start();
    const stopped = nextEvent(worker, 'worker:stop', 10_000);
    const startedAt = performance.now();
    const job = await skiplock.enqueue('quit', {}, { queue: 'lc-self-stop' });
    await stopped;
    expect(performance.now() - startedAt).toBeLessThan(10_000);
    expect((await skiplock.getJob(job.id))?.status).toBe('succeeded');

    const second = track(
      skiplock.worker({
        ...base,
        queues: ['lc-self-stop-2'],
        shutdownTimeoutMs: 20_000,
        handlers: {
          quitThenFail: async () => {
            await second.stop();
            throw new Error('failed after stop');
          },
        },
      }),
    );
    await second.start();
    const failed = nextEvent(second, 'job:failure', 10_000);
    const failing = await skiplock.enqueue('quitThenFail', {}, { queue: 'lc-self-stop-2', maxAttempts: 1 });
    const [, thrown, outcome] = await failed;
    expect((thrown as Error).message).toBe('failed after stop');
    expect(outcome.status).toBe('dead');
    expect(await skiplock.getJob(failing.id)).toMatchObject({ status: 'dead', attempts: 1 });
  });
});

describe('events', () => {
  it('a throwing listener is reported once and never disturbs result writing', async () => {
    const worker = track(
      skiplock.worker({ ...base, queues: ['lc-listener'], concurrency: 5, handlers: { work: () => {} } }),
    );
    let thrown = false;
    worker.on('job:success', () => {
      if (!thrown) {
        thrown = true;
        throw new Error('bug in my metrics listener');
      }
    });
    const successes: string[] = [];
    const stale: string[] = [];
    const errors: { code: string; source: string }[] = [];
    worker.on('job:success', (job) => successes.push(job.id));
    worker.on('job:stale', (job) => stale.push(job.id));
    worker.on('error', (error, source) => errors.push({ code: error.code, source }));
    await worker.start();
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 5 }, (_, i) => ({ kind: 'work', payload: { i }, queue: 'lc-listener' })),
    );
    await waitFor(
      async () => (await db.query(`SELECT 1 FROM ${db.jobs} WHERE queue = 'lc-listener'`)).length === 0,
      10_000,
      'every job to be completed',
    );
    await waitFor(() => successes.length === 4, 5000, 'the other listeners to hear four successes');
    expect(new Set(successes).size).toBe(4);
    expect(jobs.map((j) => j.id)).toEqual(expect.arrayContaining(successes));
    expect(stale).toEqual([]);
    expect(errors).toEqual([{ code: 'LISTENER', source: 'listener' }]);
  });

  it('a second start() is refused with its own code', async () => {
    const worker = track(
      skiplock.worker({ ...base, queues: ['lc-twice'], handlers: {}, maintenanceOnly: true }),
    );
    await worker.start();
    await expect(worker.start()).rejects.toMatchObject({ code: 'ALREADY_STARTED' });
  });

  it('warns once when the server runs with autovacuum off, and only then', async () => {
    const [setting] = await db.query<{ autovacuum: string }>(
      "SELECT current_setting('autovacuum') AS autovacuum",
    );
    const warnings: string[] = [];
    const worker = track(
      skiplock.worker({ ...base, queues: ['lc-warn'], handlers: {}, maintenanceOnly: true }),
    );
    worker.on('worker:warning', (message) => warnings.push(message));
    await worker.start();
    if (setting!.autovacuum === 'off') {
      await waitFor(() => warnings.length === 1, 10_000, 'the autovacuum warning');
      expect(warnings[0]).toContain('autovacuum = off');
    } else {
      // The check is one statement after start; a job round trip after it proves it ran.
      const done = nextEvent(worker, 'worker:claim', 10_000);
      await skiplock.enqueue('none', {}, { queue: 'lc-warn' });
      await expect(done).rejects.toThrow();
      expect(warnings).toEqual([]);
    }
  });
});

describe('start', () => {
  it('fails fast on a database that does not exist, and leaves nothing running', async () => {
    const missing = new SkiplockClass({
      connectionString: urlFor('skiplock_no_such_database'),
      schema: TEST_SCHEMA,
    });
    const worker = missing.worker({ ...base, handlers: {}, maintenanceOnly: true });
    const error = await worker.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(DatabaseError);
    expect((error as DatabaseError).sqlState).toBe('3D000');
    await worker.stop();
    await missing.close();
  });

  it('a start that fails reports its rejection alone: no event of the listener it opened meanwhile', async () => {
    const unmigrated = new SkiplockClass({ connectionString: db.url, schema: 'lc_never_migrated' });
    // A listener nothing answers fails at once, long before the checks do.
    const worker = unmigrated.worker({
      ...base,
      handlers: { none: () => {} },
      listenConnectionString: 'postgres://postgres@127.0.0.1:1/postgres',
    });
    const events: string[] = [];
    worker.on('error', (_error, source) => events.push(`error from ${source}`));
    worker.on('worker:listen', () => events.push('listen'));
    await expect(worker.start()).rejects.toBeInstanceOf(SchemaVersionError);
    await worker.stop();
    expect(events).toEqual([]);
    await unmigrated.close();
  });
});

describe('results', () => {
  it('a write whose answer was lost is not reported stale when it committed', async () => {
    const queries = new JobQueries(TEST_SCHEMA);
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ kind: 'k', payload: { i }, queue: 'lc-lost-answer' })),
    );
    const claimed = await queries.claim.claim(db.pool, {
      queues: ['lc-lost-answer'],
      kinds: ['k'],
      limit: 3,
      workerId: 'w-lost',
      visibilityTimeoutMs: 60_000,
    });
    expect(claimed.map((c) => c.id).sort()).toEqual(jobs.map((j) => j.id).sort());
    let calls = 0;
    const succeeded: string[] = [];
    const stale: string[] = [];
    const completer = new Completer<(typeof claimed)[number]>({
      async finish(batch) {
        const written = await queries.finish.finish(db.pool, batch, 'w-lost', 'delete');
        // The first write commits, then its answer is lost as if the connection had dropped.
        if (calls++ === 0) throw new DatabaseError('deadlock detected', '40P01');
        return written;
      },
      leaseStates: (ids) => queries.results.leaseStates(db.pool, ids),
      workerId: 'w-lost',
      successLeavesRow: false,
      onSuccess: (job) => succeeded.push(job.id),
      onFailure: () => {},
      onStale: (job) => stale.push(job.id),
      onError: () => {},
    });
    completer.start();
    for (const job of claimed) completer.succeeded(job);
    await completer.drain(10_000);
    expect(calls).toBe(1);
    expect(succeeded.sort()).toEqual(jobs.map((j) => j.id).sort());
    expect(stale).toEqual([]);
    expect(await db.query(`SELECT id FROM ${db.jobs} WHERE queue = 'lc-lost-answer'`)).toEqual([]);
  });
});
