import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Skiplock, ValidationError } from '../src/index.js';
import { quoteIdent, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { rolledBack } from './support/transaction.js';

const t = useTestDatabase();
let listener: pg.Client;
const notifications: string[] = [];

/** The wake-up channel of the test's schema. */
const channel = () => `skiplock:${t.schema}`;

beforeAll(async () => {
  listener = new pg.Client({ connectionString: t.db.url });
  await listener.connect();
  listener.on('notification', (n) => notifications.push(n.payload ?? ''));
});
beforeEach(async () => {
  await listener.query(`LISTEN ${quoteIdent(channel())}`);
});
afterEach(async () => {
  await listener.query('UNLISTEN *');
  notifications.splice(0);
});
afterAll(async () => {
  await listener?.end();
});

/** A marker notification sent after the event under test: everything before it was delivered. */
async function flushNotifications(): Promise<unknown[]> {
  const marker = `marker-${Math.random()}`;
  await t.query(`SELECT pg_notify($1, $2)`, [channel(), marker]);
  await waitFor(
    () => notifications.includes(marker),
    5000,
    'marker notification',
    () => notifications,
  );
  return notifications
    .splice(0)
    .filter((n) => n !== marker)
    .map((n) => JSON.parse(n));
}

describe('enqueue', () => {
  it('inserts with the defaults of the guide and returns the job', async () => {
    await flushNotifications();
    const job = await t.skiplock.enqueue('send_invoice_email', { orderId: 42 });
    expect(job).toMatchObject({
      kind: 'send_invoice_email',
      queue: 'default',
      payload: { orderId: 42 },
      priority: 0,
      attempts: 0,
      maxAttempts: 20,
    });
    expect(job.id).toMatch(/^[1-9][0-9]*$/);
    const [row] = await t.query(
      `SELECT status, locked_at, last_error, run_at <= now() AS due FROM ${t.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(row).toEqual({ status: 'queued', locked_at: null, last_error: null, due: true });
    expect(await flushNotifications()).toEqual([{ type: 'insert', queue: 'default', delayMs: 0 }]);
  });

  it('takes options given as undefined as left out (conditional options under exactOptionalPropertyTypes)', async () => {
    const cond = false as boolean;
    const job = await t.skiplock.enqueue(
      'send_invoice_email',
      { orderId: 7 },
      {
        queue: undefined,
        priority: undefined,
        runAt: undefined,
        delayMs: cond ? 5 : undefined,
        maxAttempts: undefined,
        uniqueKey: undefined,
        uniqueStates: undefined,
        onConflict: undefined,
        client: undefined,
      },
    );
    expect(job).toMatchObject({ queue: 'default', priority: 0, maxAttempts: 20, duplicate: false });
    const [many] = await t.skiplock.enqueueMany([
      { kind: 'send_invoice_email', payload: { orderId: 8 }, queue: undefined, delayMs: undefined },
    ]);
    expect(many).toMatchObject({ queue: 'default', priority: 0 });
  });

  it("commits with the caller's transaction and wakes on commit only", async () => {
    await flushNotifications();
    const before = await t.jobCount();
    const client = await t.db.pool.connect();
    try {
      await client.query('BEGIN');
      const job = await t.skiplock.enqueue('in_tx', { a: 1 }, { client, queue: 'tx' });
      // Not visible outside, and nobody woken, before COMMIT.
      expect(await t.skiplock.getJob(job.id)).toBeUndefined();
      expect(await flushNotifications()).toEqual([]);
      await client.query('COMMIT');
      expect((await t.skiplock.getJob(job.id))?.status).toBe('queued');
      expect(await flushNotifications()).toEqual([{ type: 'insert', queue: 'tx', delayMs: 0 }]);
    } finally {
      client.release();
    }
    expect(await t.jobCount()).toBe(before + 1);
  });

  it('leaves nothing and wakes nobody when the transaction rolls back', async () => {
    await flushNotifications();
    const before = await t.jobCount();
    await rolledBack(t.db.pool, async (client) => {
      await t.skiplock.enqueue('rolled_back', {}, { client });
      await t.skiplock.enqueueMany([{ kind: 'rolled_back', payload: {} }], { client });
    });
    expect(await t.jobCount()).toBe(before);
    expect(await flushNotifications()).toEqual([]);
  });

  it('schedules with delayMs and runAt on the database clock', async () => {
    const delayed = await t.skiplock.enqueue('later', {}, { delayMs: 60_000 });
    const [row] = await t.query<{ secs: number }>(
      `SELECT EXTRACT(EPOCH FROM run_at - now())::float8 AS secs FROM ${t.jobs} WHERE id = $1`,
      [delayed.id],
    );
    expect(row!.secs).toBeGreaterThan(58);
    expect(row!.secs).toBeLessThanOrEqual(60);
    const at = new Date('2030-01-02T03:04:05.678Z');
    const scheduled = await t.skiplock.enqueue(
      'later',
      {},
      { runAt: at, priority: -5, maxAttempts: 3, queue: 'sched' },
    );
    expect(scheduled.runAt.toISOString()).toBe(at.toISOString());
    expect(scheduled).toMatchObject({ priority: -5, maxAttempts: 3, queue: 'sched' });
  });

  it('notifies the delay of future jobs so workers can set a timer', async () => {
    await flushNotifications();
    await t.skiplock.enqueue('later', {}, { queue: 'future', delayMs: 30_000 });
    const [parsed] = (await flushNotifications()) as { queue: string; delayMs: number }[];
    expect(parsed!.queue).toBe('future');
    expect(parsed!.delayMs).toBeGreaterThan(29_000);
    expect(parsed!.delayMs).toBeLessThanOrEqual(30_000);
  });

  it('stores names as data: quotes, SQL and unicode round-trip', async () => {
    const names = [`it's "quoted"`, "'); DROP TABLE jobs; --", '큐 🚀', ' spaced ', '\\backslash'];
    for (const name of names) {
      const job = await t.skiplock.enqueue(name, { name }, { queue: name });
      const read = await t.skiplock.getJob(job.id);
      expect(read?.kind).toBe(name);
      expect(read?.queue).toBe(name);
      expect(read?.payload).toEqual({ name });
    }
  });
});

describe('the named insert', () => {
  /** Names of the named statements on the connection a Skiplock's idle pool hands out next (its only one here). */
  const preparedOn = async (s: Skiplock) =>
    (await s.pool.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).rows.map(
      (r) => r.name,
    );

  it('is kept on the connection; one the server dropped fails no call and is sent once, unnamed from then on', async () => {
    const s = new Skiplock({ connectionString: t.url, schema: t.schema });
    t.defer(() => s.close());
    await s.enqueue('named', { n: 1 });
    expect(await preparedOn(s)).toEqual([expect.stringMatching(/_insert_one_[0-9a-f]{8}$/)]);
    // The connection still believes it holds the statement; the server refuses it (SQLSTATE 26000).
    await s.pool.query('DEALLOCATE ALL');
    await s.enqueue('named', { n: 2 });
    await s.enqueue('named', { n: 3 }, { tags: ['t'] });
    expect(await preparedOn(s)).toEqual([]);
    expect(await t.query(`SELECT payload FROM ${t.jobs} WHERE kind = 'named' ORDER BY id`)).toEqual([
      { payload: { n: 1 } },
      { payload: { n: 2 } },
      { payload: { n: 3 } },
    ]);
  });

  it('is never sent with preparedStatements: false', async () => {
    const s = new Skiplock({ connectionString: t.url, schema: t.schema, preparedStatements: false });
    t.defer(() => s.close());
    await s.enqueue('unnamed', { n: 1 });
    await s.enqueue('unnamed', { n: 2 }, { tags: ['t'] });
    expect(await preparedOn(s)).toEqual([]);
    expect(await t.jobCount("kind = 'unnamed'")).toBe(2);
  });

  it('refuses a preparedStatements that is not a boolean, naming it', () => {
    expect(() => new Skiplock({ connectionString: t.url, preparedStatements: 'yes' as never })).toThrow(
      expect.objectContaining({ field: 'preparedStatements', code: 'VALIDATION' }),
    );
  });
});

describe('enqueueMany', () => {
  it('inserts all jobs in one statement, in input order', async () => {
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 50 }, (_, i) => ({
        kind: `k${i % 3}`,
        payload: { i },
        queue: 'many',
        priority: i % 5,
      })),
    );
    expect(jobs.map((j) => (j.payload as { i: number }).i)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(jobs.map((j) => j.priority)).toEqual(Array.from({ length: 50 }, (_, i) => i % 5));
    const ids = jobs.map((j) => BigInt(j.id));
    expect([...ids].sort((a, b) => (a < b ? -1 : 1))).toEqual(ids);
  });

  it('inserts nothing when any item is invalid, naming the item and field', async () => {
    const before = await t.jobCount();
    const attempt = t.skiplock.enqueueMany([
      { kind: 'ok', payload: {} },
      { kind: 'ok', payload: {}, delayMs: -1 },
    ]);
    await expect(attempt).rejects.toMatchObject({ name: 'ValidationError', field: 'jobs[1].delayMs' });
    expect(await t.jobCount()).toBe(before);
  });

  it('returns [] for an empty list', async () => {
    expect(await t.skiplock.enqueueMany([])).toEqual([]);
  });
});

describe('bad input (SPEC §9)', () => {
  const circular: Record<string, unknown> = {};
  circular.self = circular;
  const cases: [string, () => Promise<unknown>, string][] = [
    ['unknown option', () => t.skiplock.enqueue('k', {}, { queues: 'x' } as never), 'options.queues'],
    ['BigInt payload', () => t.skiplock.enqueue('k', { n: 1n }), 'payload.n'],
    ['circular payload', () => t.skiplock.enqueue('k', circular), 'payload.self'],
    ['undefined inside payload', () => t.skiplock.enqueue('k', { u: undefined }), 'payload.u'],
    ['function payload', () => t.skiplock.enqueue('k', { f: () => 1 }), 'payload.f'],
    ['NaN in payload', () => t.skiplock.enqueue('k', [Number.NaN]), 'payload[0]'],
    ['NUL in payload string', () => t.skiplock.enqueue('k', { s: 'a\u0000b' }), 'payload.s'],
    ['lone surrogate', () => t.skiplock.enqueue('k', { s: '\ud800' }), 'payload.s'],
    ['Date in payload', () => t.skiplock.enqueue('k', { at: new Date() }), 'payload.at'],
    ['maxAttempts 0', () => t.skiplock.enqueue('k', {}, { maxAttempts: 0 }), 'options.maxAttempts'],
    ['maxAttempts 1.5', () => t.skiplock.enqueue('k', {}, { maxAttempts: 1.5 }), 'options.maxAttempts'],
    ['negative delayMs', () => t.skiplock.enqueue('k', {}, { delayMs: -1 }), 'options.delayMs'],
    ['NaN delayMs', () => t.skiplock.enqueue('k', {}, { delayMs: Number.NaN }), 'options.delayMs'],
    ['fractional priority', () => t.skiplock.enqueue('k', {}, { priority: 0.5 }), 'options.priority'],
    ['priority beyond int', () => t.skiplock.enqueue('k', {}, { priority: 2 ** 31 }), 'options.priority'],
    ['invalid date', () => t.skiplock.enqueue('k', {}, { runAt: new Date('nope') }), 'options.runAt'],
    [
      'runAt and delayMs',
      () => t.skiplock.enqueue('k', {}, { runAt: new Date(), delayMs: 5 }),
      'options.delayMs',
    ],
    ['empty kind', () => t.skiplock.enqueue('', {}), 'kind'],
    ['NUL in kind', () => t.skiplock.enqueue('a\u0000', {}), 'kind'],
    ['empty queue', () => t.skiplock.enqueue('k', {}, { queue: '' }), 'options.queue'],
    ['non-string queue', () => t.skiplock.enqueue('k', {}, { queue: 5 as never }), 'options.queue'],
    ['client without query', () => t.skiplock.enqueue('k', {}, { client: {} as never }), 'options.client'],
  ];
  it.each(cases)('%s → ValidationError naming %s; nothing inserted', async (_, call, field) => {
    const before = await t.jobCount();
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe(field);
    expect((error as ValidationError).code).toBe('VALIDATION');
    expect((error as ValidationError).message).toContain(field);
    expect(await t.jobCount()).toBe(before);
  });
});

describe('plain SQL insert', () => {
  it('refuses an infinite run_at with a constraint that names the column, inserting nothing', async () => {
    const before = await t.jobCount();
    for (const runAt of ['infinity', '-infinity']) {
      const error = await t
        .query(`INSERT INTO ${t.jobs} (kind, run_at) VALUES ('from_psql', $1)`, [runAt])
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: '23514', constraint: 'jobs_run_at_chk' });
    }
    expect(await t.jobCount()).toBe(before);
  });

  it('is picked up at once by a worker (NOTIFY trigger), not by the slow poll', async () => {
    let ran: unknown;
    const worker = t.worker({
      pollIntervalMs: 600_000,
      queues: ['psql'],
      handlers: {
        from_psql: (job) => {
          ran = job.payload;
        },
      },
    });
    await worker.start();
    await t.query(`INSERT INTO ${t.jobs} (kind, queue, payload) VALUES ('from_psql', 'psql', '{"x": 1}')`);
    await waitFor(() => ran, 5000, 'the plain-SQL job to run');
    expect(ran).toEqual({ x: 1 });
  });
});
