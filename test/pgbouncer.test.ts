/**
 * Behind a real PgBouncer in transaction pool mode: producers enqueue in
 * transactions, migrations run, workers claim (every job exactly once) with
 * wake-ups from a direct LISTEN connection or by polling alone, and a LISTEN
 * issued through the pooler is caught by its probe with one warning.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseError, Skiplock, type Worker } from '../src/index.js';
import { loadMigrations } from '../src/migrations/migrator.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { findPgBouncer, type PgBouncer, startPgBouncer } from './support/pgbouncer.js';

const program = findPgBouncer();

/** Worker options for a transaction pooler: no startup options, no named prepared statements. */
const behindPgBouncer = { handleSignals: false, sessionSettings: false, preparedStatements: false } as const;

describe.skipIf(!program)('behind PgBouncer in transaction mode', () => {
  let db: TestDatabase;
  let bouncer: PgBouncer;
  let bounced: Skiplock;
  let bouncedPool: pg.Pool;

  beforeAll(async () => {
    db = await createTestDatabase();
    bouncer = await startPgBouncer(program!);
    bouncedPool = new pg.Pool({ connectionString: bouncer.urlFor(db.name), max: 10 });
    bouncedPool.on('error', () => {});
    bounced = new Skiplock({ connectionString: bouncer.urlFor(db.name), schema: TEST_SCHEMA });
  });
  afterAll(async () => {
    await bounced?.close();
    await bouncedPool?.end();
    await bouncer?.stop();
    await db?.close();
  });

  it('migrates a fresh database through the pooler', async () => {
    const fresh = await createTestDatabase(false);
    const s = new Skiplock({ connectionString: bouncer.urlFor(fresh.name), schema: TEST_SCHEMA });
    try {
      const versions = loadMigrations().map((m) => m.version);
      expect(await s.migrate()).toEqual({ applied: versions, version: versions.at(-1) });
      expect(await s.migrate()).toEqual({ applied: [], version: versions.at(-1) });
    } finally {
      await s.close();
      await fresh.close();
    }
  });

  it('a producer enqueues in the caller’s transaction: commit keeps the job, rollback leaves nothing', async () => {
    const client = await bouncedPool.connect();
    try {
      await client.query('BEGIN');
      const kept = await bounced.enqueue('bounced', { n: 1 }, { client, queue: 'q-tx' });
      await bounced.enqueueMany([{ kind: 'bounced', payload: { n: 2 }, queue: 'q-tx' }], { client });
      await client.query('COMMIT');
      await client.query('BEGIN');
      await bounced.enqueue('bounced', { n: 3 }, { client, queue: 'q-tx' });
      await client.query('ROLLBACK');
      expect(await db.query(`SELECT payload FROM ${db.jobs} WHERE queue = 'q-tx' ORDER BY id`)).toEqual([
        { payload: { n: 1 } },
        { payload: { n: 2 } },
      ]);
      expect(await bounced.getJob(kept.id)).toMatchObject({ id: kept.id, payload: { n: 1 } });
    } finally {
      client.release();
    }
  });

  it('a producer with the defaults enqueues through the pooler: each job once, however the server connections are shared', async () => {
    // Named inserts meet server connections that never parsed them; the refusals must not fail a call or insert twice.
    const s = new Skiplock({ connectionString: bouncer.urlFor(db.name), schema: TEST_SCHEMA });
    try {
      const ids: string[] = [];
      for (let wave = 0; wave < 10; wave++) {
        const jobs = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            s.enqueue('bounced', { n: wave * 20 + i }, { queue: 'q-named' }),
          ),
        );
        ids.push(...jobs.map((j) => j.id));
      }
      const rows = await db.query<{ id: string; n: number }>(
        `SELECT id::text, (payload->>'n')::int AS n FROM ${db.jobs} WHERE queue = 'q-named' ORDER BY (payload->>'n')::int`,
      );
      expect(rows.map((r) => r.n)).toEqual(Array.from({ length: 200 }, (_, i) => i));
      expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    } finally {
      await s.close();
    }
  });

  it('a worker with session settings is refused by the pooler, with an error that names sessionSettings', async () => {
    const worker = bounced.worker({
      handleSignals: false,
      listenConnectionString: db.url,
      handlers: { x: () => {} },
    });
    const refused = await worker.start().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(DatabaseError);
    expect((refused as DatabaseError).sqlState).toBe('08P01');
    expect((refused as DatabaseError).message).toMatch(
      /unsupported startup parameter.*behind PgBouncer in transaction mode, give the worker sessionSettings: false/,
    );
  });

  /** Enqueues `count` jobs of queue `queue`, waits until the started workers ran them all, stops them. */
  async function runAll(workers: Worker[], ran: Map<string, number>, queue: string, count: number) {
    const jobs = await bounced.enqueueMany(
      Array.from({ length: count }, (_, i) => ({ kind: 'bounced_work', payload: { i }, queue })),
    );
    await waitFor(
      async () =>
        (await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE queue = $1`, [queue]))[0]!.n === 0,
      30_000,
      `all ${count} jobs of ${queue} done (ran ${ran.size})`,
    );
    for (const w of workers) await w.stop();
    return jobs.map((j) => j.id);
  }

  it('workers claim through the pooler, each job exactly once, woken through a direct LISTEN', async () => {
    const ran = new Map<string, number>();
    const warnings: string[] = [];
    const errors: string[] = [];
    const workers = [1, 2].map(() => {
      const w = bounced.worker({
        ...behindPgBouncer,
        queues: ['q-direct'],
        concurrency: 4,
        // Far beyond the deadline below: only a wake-up can start the first job in time.
        pollIntervalMs: 60_000,
        listenConnectionString: db.url,
        handlers: { bounced_work: (job) => void ran.set(job.id, (ran.get(job.id) ?? 0) + 1) },
      });
      w.on('worker:warning', (m) => warnings.push(m));
      w.on('error', (e, source) => errors.push(`${source}: ${e.message}`));
      return w;
    });
    const listening = workers.map((w) => nextEvent(w, 'worker:listen'));
    for (const w of workers) await w.start();
    await Promise.all(listening);
    const first = nextEvent(workers[0]!, 'job:success', 5_000);
    const second = nextEvent(workers[1]!, 'job:success', 5_000);
    const ids = await runAll(workers, ran, 'q-direct', 200);
    // Woken, not polled: a worker ran a job within the deadline. With claims of hundreds, one worker
    // may take them all, so the other's promise rejects when it stops; `any` waits for a success.
    await Promise.any([first, second]);
    expect([...ran.keys()].sort()).toEqual([...ids].sort());
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
    expect(errors).toEqual([]);
    expect(warnings.filter((m) => m.includes('probe'))).toEqual([]);
  });

  it('workers with named claims (the default) claim through the pooler: each job exactly once, no error', async () => {
    // Named claims meet server connections that never parsed them: the first refusal turns them off.
    const ran = new Map<string, number>();
    const errors: string[] = [];
    const namedWorkers = (queue: string) =>
      [1, 2].map(() => {
        const w = bounced.worker({
          handleSignals: false,
          sessionSettings: false,
          queues: [queue],
          concurrency: 4,
          batchSize: 5,
          pollIntervalMs: 100,
          listenConnectionString: db.url,
          handlers: { bounced_work: (job) => void ran.set(job.id, (ran.get(job.id) ?? 0) + 1) },
        });
        w.on('error', (e, source) => errors.push(`${source}: ${e.message}`));
        return w;
      });
    const open = namedWorkers('q-named-claim');
    for (const w of open) await w.start();
    const ids = await runAll(open, ran, 'q-named-claim', 300);
    // A limited queue's claim is another statement, named the same way.
    await bounced.setQueueLimits('q-named-limited', { concurrency: 3 });
    const limited = namedWorkers('q-named-limited');
    for (const w of limited) await w.start();
    const limitedIds = await runAll(limited, ran, 'q-named-limited', 100);
    expect([...ran.keys()].sort()).toEqual([...ids, ...limitedIds].sort());
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
    expect(errors).toEqual([]);
  });

  it('waitFor through the pooler hears the job finish on its direct LISTEN connection (listenConnectionString)', async () => {
    const s = new Skiplock({
      connectionString: bouncer.urlFor(db.name),
      schema: TEST_SCHEMA,
      listenConnectionString: db.url,
    });
    const worker = bounced.worker({
      ...behindPgBouncer,
      queues: ['q-wait'],
      pollIntervalMs: 100,
      listenConnectionString: db.url,
      handlers: { waited: () => 'done' },
    });
    try {
      await worker.start();
      // Due in a second: waitFor reads it queued first, then must hear it finish.
      const job = await s.enqueue('waited', {}, { queue: 'q-wait', delayMs: 1000 });
      // Its poll comes every 5 s: within 4 s, only a notification can have told it.
      const outcome = await s.waitFor(job.id, { timeoutMs: 4000 });
      expect(outcome.status).toBe('succeeded');
    } finally {
      await worker.stop();
      await s.close();
    }
  });

  it('workers with listen: false poll through the pooler and open no LISTEN connection', async () => {
    const ran = new Map<string, number>();
    const listens: number[] = [];
    const worker = bounced.worker({
      ...behindPgBouncer,
      listen: false,
      queues: ['q-poll'],
      concurrency: 4,
      pollIntervalMs: 100,
      handlers: { bounced_work: (job) => void ran.set(job.id, (ran.get(job.id) ?? 0) + 1) },
    });
    worker.on('worker:listen', () => listens.push(1));
    await worker.start();
    const ids = await runAll([worker], ran, 'q-poll', 50);
    expect([...ran.keys()].sort()).toEqual([...ids].sort());
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
    expect(listens).toEqual([]);
    const listeners = await db.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'",
      [db.name],
    );
    expect(listeners).toEqual([{ n: 0 }]);
  });

  it('a LISTEN through the pooler hears nothing: the probe warns once and the worker polls', async () => {
    const warnings: string[] = [];
    const ran: string[] = [];
    const worker = bounced.worker({
      ...behindPgBouncer,
      queues: ['q-deaf'],
      pollIntervalMs: 200,
      handlers: { deaf: (job) => void ran.push(job.id) },
    });
    worker.on('worker:warning', (m) => warnings.push(m));
    worker.on('error', () => {});
    await worker.start();
    const message = await waitFor(
      () => warnings.find((m) => m.includes('probe')),
      15_000,
      'a warning about the probe',
    );
    expect(message).toContain('did not hear its own probe within 2000 ms');
    expect(message).toContain('listenConnectionString');
    const job = await bounced.enqueue('deaf', {}, { queue: 'q-deaf' });
    await waitFor(() => ran.includes(job.id), 10_000, 'the job, found by polling');
    await worker.stop();
    expect(warnings.filter((m) => m.includes('probe'))).toHaveLength(1);
  });
});
