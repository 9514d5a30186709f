import { describe, expect, it } from 'vitest';
import { SchemaVersionError, Skiplock, ValidationError } from '../src/index.js';
import { loadMigrations } from '../src/migrations/migrator.js';
import { tableIn } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

async function insert(kind: string, queue: string, status: string, extra = '') {
  const [row] = await t.query<{ id: string }>(
    `INSERT INTO ${t.jobs} (kind, queue, status, attempts, last_error, run_at ${extra ? ', finished_at' : ''})
     VALUES ($1, $2, $3, 5, 'it broke', now() + interval '1 hour' ${extra ? ', now()' : ''}) RETURNING id`,
    [kind, queue, status],
  );
  return row!.id;
}

describe('requeue', () => {
  it('puts dead and failed jobs back as the guide does, by kind, queue, status or ids', async () => {
    const deadEmail = await insert('send_invoice_email', 'rq', 'dead', 'finished');
    const deadOther = await insert('resize_image', 'rq', 'dead');
    const failedEmail = await insert('send_invoice_email', 'rq', 'failed');
    const queuedEmail = await insert('send_invoice_email', 'rq', 'queued');

    expect(await t.skiplock.requeue({ status: 'dead', kind: 'send_invoice_email', queue: 'rq' })).toBe(1);
    const [requeued] = await t.query(
      `SELECT status, attempts, last_error, finished_at, run_at <= now() AS due FROM ${t.jobs} WHERE id = $1`,
      [deadEmail],
    );
    expect(requeued).toEqual({
      status: 'queued',
      attempts: 0,
      last_error: null,
      finished_at: null,
      due: true,
    });

    expect(await t.skiplock.requeue({ ids: [failedEmail, queuedEmail] })).toBe(1);
    expect((await t.skiplock.getJob(failedEmail))?.status).toBe('queued');
    // A queued job is never touched by requeue.
    expect(await t.skiplock.getJob(queuedEmail)).toMatchObject({ status: 'queued', attempts: 5 });

    expect(await t.skiplock.requeue({ queue: 'rq' })).toBe(1);
    expect((await t.skiplock.getJob(deadOther))?.status).toBe('queued');
    expect(await t.skiplock.requeue({ queue: 'rq' })).toBe(0);
  });

  it('refuses a bad filter with a typed error', async () => {
    await expect(t.skiplock.requeue({ status: 'running' as never })).rejects.toMatchObject({
      field: 'filter.status',
    });
    await expect(t.skiplock.requeue({ ids: ['1; DROP TABLE x'] })).rejects.toMatchObject({
      field: 'filter.ids[0]',
    });
    await expect(t.skiplock.requeue({ kinds: 'x' } as never)).rejects.toBeInstanceOf(ValidationError);
  });
});

describe('stats and inspection', () => {
  async function insertStatsRows() {
    await t.query(
      `INSERT INTO ${t.jobs} (kind, queue, run_at) VALUES
         ('a', 'stats', now() - interval '10 seconds'), ('a', 'stats', now() - interval '2 seconds'),
         ('a', 'stats', now() + interval '1 hour'), ('b', 'other', now())`,
    );
    await t.query(`INSERT INTO ${t.jobs} (kind, queue, status) VALUES ('a', 'stats', 'dead')`);
  }

  it('counts per queue and status, with the oldest due job’s age', async () => {
    await insertStatsRows();
    const stats = await t.skiplock.stats();
    expect(stats.map(({ queue, status, count }) => ({ queue, status, count }))).toEqual([
      { queue: 'other', status: 'queued', count: 1 },
      { queue: 'stats', status: 'dead', count: 1 },
      { queue: 'stats', status: 'queued', count: 3 },
    ]);
    const queued = stats.find((s) => s.queue === 'stats' && s.status === 'queued')!;
    expect(queued.oldestQueuedAgeMs).toBeGreaterThanOrEqual(10_000);
    expect(queued.oldestQueuedAgeMs).toBeLessThan(20_000);
    expect(stats.find((s) => s.status === 'dead')!.oldestQueuedAgeMs).toBeNull();
  });

  it('lists jobs by filter and reads one by id', async () => {
    await insertStatsRows();
    const listed = await t.skiplock.listJobs({ queue: 'stats', status: ['queued'], limit: 2 });
    expect(listed).toHaveLength(2);
    expect(listed.every((j) => j.queue === 'stats' && j.status === 'queued')).toBe(true);
    // Newest first; the next page continues after the last id.
    expect(BigInt(listed[0]!.id) > BigInt(listed[1]!.id)).toBe(true);
    const all = await t.skiplock.listJobs({
      queue: 'stats',
      status: ['queued'],
      order: 'oldest',
      limit: 1000,
    });
    const next = await t.skiplock.listJobs({
      queue: 'stats',
      status: ['queued'],
      limit: 2,
      after: listed[1]!.id,
    });
    const newestFirst = all.map((j) => j.id).reverse();
    expect(next.map((j) => j.id)).toEqual(newestFirst.slice(2, 4));
    expect(BigInt(all[0]!.id) < BigInt(all[1]!.id)).toBe(true);
    const one = await t.skiplock.getJob(listed[0]!.id);
    expect(one).toEqual({ ...listed[0], result: null, progress: null, logs: [] });
    expect(await t.skiplock.getJob('999999999')).toBeUndefined();
    await expect(t.skiplock.getJob('abc')).rejects.toBeInstanceOf(ValidationError);
    await expect(t.skiplock.getJob('9999999999999999999')).rejects.toBeInstanceOf(ValidationError);
    expect(await t.skiplock.getJob('9223372036854775807')).toBeUndefined();
  });
});

describe('migrations', () => {
  it('are idempotent', async () => {
    expect(await t.skiplock.migrate()).toEqual({ applied: [], version: loadMigrations().at(-1)?.version });
  });

  it('refuse a database whose schema is newer than the library', async () => {
    await t.query(`INSERT INTO ${tableIn(t.schema, 'migrations')} (version, name) VALUES (99, 'future')`);
    const error = await t.skiplock.migrate().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toContain('version 99');
  });

  it('work in any schema name, quoted, side by side', async () => {
    const names = ['Mixed Case', 'we"ird; DROP TABLE jobs; --', 'ユニコード'];
    for (const schema of names) {
      const s = new Skiplock({ pool: t.db.pool, schema });
      await s.migrate();
      const job = await s.enqueue('k', { schema });
      expect((await s.getJob(job.id))?.payload).toEqual({ schema });
      await s.close();
    }
    const [row] = await t.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = ANY($1)`,
      [names],
    );
    expect(row!.n).toBe(3);
  });

  it('refuse a schema name that cannot be a channel or identifier', () => {
    expect(() => new Skiplock({ pool: t.db.pool, schema: 'x'.repeat(55) })).toThrow(ValidationError);
    expect(() => new Skiplock({ pool: t.db.pool, schema: '' })).toThrow(/schema/);
    expect(() => new Skiplock({ pool: t.db.pool, schema: 'a\u0000b' })).toThrow(/schema/);
  });
});

describe('configuration', () => {
  it('rejects unknown options and conflicting connections', () => {
    expect(() => new Skiplock({ pool: t.db.pool, shcema: 'x' } as never)).toThrow(/shcema: unknown option/);
    expect(() => new Skiplock({ pool: t.db.pool, connectionString: t.db.url })).toThrow(ValidationError);
  });

  it('closes the pool it made, not the caller’s', async () => {
    const own = new Skiplock({ connectionString: t.db.url, schema: t.schema });
    await own.stats();
    await own.close();
    await expect(own.stats()).rejects.toMatchObject({ code: 'CLOSED' });
    const shared = new Skiplock({ pool: t.db.pool, schema: t.schema });
    await shared.close();
    expect((await t.db.pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});

describe('a worker on a schema that was never migrated', () => {
  it('fails at start with a SchemaVersionError that says what to do', async () => {
    const s = new Skiplock({ pool: t.db.pool, schema: 'never_migrated' });
    const worker = s.worker({ handleSignals: false, handlers: {}, maintenanceOnly: true });
    const error = await worker.start().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toContain(
      `version 0, this library needs ${loadMigrations().at(-1)?.version}: run migrate()`,
    );
    await s.close();
  });
});
