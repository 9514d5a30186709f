/**
 * The ORM adapters with the real libraries on real PostgreSQL: a job enqueued
 * in the library's transaction exists and wakes workers on commit, and leaves
 * nothing and wakes nobody on rollback. Every call that takes `client` reads
 * rows back through the adapter as it would through pg.
 */
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { CamelCasePlugin, Kysely, type KyselyPlugin, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromDrizzle } from '../src/adapters/drizzle.js';
import { fromKysely } from '../src/adapters/kysely.js';
import { fromPostgresJs } from '../src/adapters/postgres-js.js';
import { fromPrisma } from '../src/adapters/prisma.js';
import { translateError } from '../src/db/executor.js';
import { DatabaseError, type Queryable } from '../src/index.js';
import { openPrisma, type PrismaLike } from './adapters/prisma-client.js';
import { useFileDatabase } from './support/file-database.js';
import { listenForWakeUps, type WakeUpListener } from './support/wake-ups.js';

const { db, skiplock } = useFileDatabase();
let listener: WakeUpListener;
const closers: (() => Promise<unknown>)[] = [];

/** One library: runs `fn` in one of its transactions, handing skiplock the adapted transaction. */
interface Stack {
  name: string;
  transaction<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
  /** The library's database object itself, outside any transaction. */
  direct: Queryable;
}

const stacks: Stack[] = [];

beforeAll(async () => {
  listener = await listenForWakeUps(db.url);
  await db.query('CREATE TABLE orders (id int PRIMARY KEY)');

  const addPostgresJs = (name: string, options: { prepare?: boolean }) => {
    const sql = postgres(db.url, { onnotice: () => {}, ...options });
    closers.push(() => sql.end());
    stacks.push({
      name,
      transaction: (fn) => sql.begin((tx) => fn(fromPostgresJs(tx))) as Promise<never>,
      direct: fromPostgresJs(sql),
    });
  };
  addPostgresJs('postgres.js', {});
  addPostgresJs('postgres.js (prepare: false)', { prepare: false });

  const addKysely = (name: string, plugins: KyselyPlugin[]) => {
    const pool = new pg.Pool({ connectionString: db.url });
    pool.on('error', () => {});
    const kysely = new Kysely<{ orders: { id: number } }>({
      dialect: new PostgresDialect({ pool }),
      plugins,
    });
    closers.push(() => kysely.destroy());
    stacks.push({
      name,
      transaction: (fn) => kysely.transaction().execute((trx) => fn(fromKysely(trx))),
      direct: fromKysely(kysely),
    });
  };
  addKysely('Kysely', []);
  addKysely('Kysely (CamelCasePlugin)', [new CamelCasePlugin()]);

  const addDrizzle = (
    name: string,
    drizzleDb: ReturnType<typeof drizzleNodePg> | ReturnType<typeof drizzlePostgresJs>,
    close: () => Promise<void>,
  ) => {
    closers.push(close);
    stacks.push({
      name,
      transaction: (fn) => drizzleDb.transaction((tx) => fn(fromDrizzle(tx))),
      direct: fromDrizzle(drizzleDb),
    });
  };
  const drizzlePool = new pg.Pool({ connectionString: db.url });
  drizzlePool.on('error', () => {});
  addDrizzle('Drizzle (node-postgres)', drizzleNodePg(drizzlePool), () => drizzlePool.end());
  const drizzleSql = postgres(db.url, { onnotice: () => {} });
  addDrizzle('Drizzle (postgres.js)', drizzlePostgresJs(drizzleSql), () => drizzleSql.end());

  const prisma: PrismaLike = await openPrisma(db.url);
  closers.push(() => prisma.$disconnect());
  stacks.push({
    name: 'Prisma',
    transaction: (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx))),
    direct: fromPrisma(prisma),
  });
}, 120_000);

afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  await listener?.close();
});

class Rollback extends Error {}

const names = [
  'postgres.js',
  'postgres.js (prepare: false)',
  'Kysely',
  'Kysely (CamelCasePlugin)',
  'Drizzle (node-postgres)',
  'Drizzle (postgres.js)',
  'Prisma',
];

describe.each(names)('%s', (name) => {
  const stack = () => stacks.find((s) => s.name === name)!;
  const queue = `q-${name.replace(/\W+/g, '-').toLowerCase()}`;

  it('commit: the job exists, as enqueued, and workers are woken', async () => {
    await listener.settle();
    const runAt = new Date(Date.now() + 60_000);
    const job = await stack().transaction((client) =>
      skiplock.enqueue(
        'adapted',
        { via: name, n: [1, null] },
        { client, queue, priority: 2, runAt, tags: ['t "1"', 'b,c', 'NULL'], startWithinMs: 60_000 },
      ),
    );
    expect(job).toEqual({
      id: expect.stringMatching(/^\d+$/),
      kind: 'adapted',
      queue,
      payload: { via: name, n: [1, null] },
      priority: 2,
      runAt,
      attempts: 0,
      maxAttempts: 20,
      createdAt: expect.any(Date),
      duplicate: false,
    });
    const stored = await skiplock.getJob(job.id);
    expect(stored).toMatchObject({
      kind: 'adapted',
      queue,
      payload: { via: name, n: [1, null] },
      runAt,
      tags: ['t "1"', 'b,c', 'NULL'],
    });
    expect(stored!.startBy!.getTime() - stored!.createdAt.getTime()).toBe(60_000);
    const wakeUps = await listener.settle();
    expect(wakeUps.map((w) => [w.type, w.queue, w.delayMs > 50_000])).toEqual([['insert', queue, true]]);
  });

  it('rollback: no job, nobody woken', async () => {
    await listener.settle();
    const outcome = await stack()
      .transaction(async (client) => {
        await skiplock.enqueue('adapted_rolled_back', { via: name }, { client, queue });
        await skiplock.enqueueMany([{ kind: 'adapted_rolled_back', payload: {}, queue }], { client });
        throw new Rollback();
      })
      .catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(Rollback);
    expect(
      await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE kind = 'adapted_rolled_back'`),
    ).toEqual([{ n: 0 }]);
    expect(await listener.settle()).toEqual([]);
  });

  it('every call that takes client reads rows as through pg', async () => {
    const runAt = new Date('2030-01-02T03:04:05.678Z');
    const startBy = new Date('2030-01-02T04:04:05.678Z');
    const { jobs, fetched, listed, requeued, stats } = await stack().transaction(async (client) => {
      const jobs = await skiplock.enqueueMany(
        [
          {
            kind: 'many',
            payload: { i: 1 },
            queue: `${queue}-many`,
            runAt,
            tags: ['a "b"', 'c,d'],
            startBy,
          },
          { kind: 'many', payload: { i: 2 }, queue: `${queue}-many`, delayMs: 1_000 },
          {
            kind: 'many',
            payload: { i: 3, s: 'quote " backslash \\ {brace}, NULL' },
            queue: `${queue}-many`,
          },
        ],
        { client },
      );
      const fetched = await skiplock.getJob(jobs[0]!.id, { client });
      const listed = await skiplock.listJobs({ client, queue: `${queue}-many`, order: 'oldest' });
      await client.query(`UPDATE ${db.jobs} SET status = 'dead' WHERE id = $1::bigint`, [jobs[2]!.id]);
      const requeued = await skiplock.requeue({ client, ids: [jobs[2]!.id] });
      const stats = await skiplock.stats({ client });
      return { jobs, fetched, listed, requeued, stats };
    });
    expect(jobs.map((j) => [j.payload, typeof j.id, j.runAt instanceof Date])).toEqual([
      [{ i: 1 }, 'string', true],
      [{ i: 2 }, 'string', true],
      [{ i: 3, s: 'quote " backslash \\ {brace}, NULL' }, 'string', true],
    ]);
    expect(await db.query(`SELECT payload FROM ${db.jobs} WHERE id = $1`, [jobs[2]!.id])).toEqual([
      { payload: { i: 3, s: 'quote " backslash \\ {brace}, NULL' } },
    ]);
    expect(jobs[0]!.runAt).toEqual(runAt);
    expect(jobs[1]!.runAt.getTime() - jobs[1]!.createdAt.getTime()).toBeGreaterThanOrEqual(1_000);
    expect(fetched).toEqual({
      id: jobs[0]!.id,
      queue: `${queue}-many`,
      kind: 'many',
      payload: { i: 1 },
      status: 'queued',
      priority: 0,
      runAt,
      attempts: 0,
      maxAttempts: 20,
      createdAt: jobs[0]!.createdAt,
      lockedAt: null,
      lockedBy: null,
      leaseSeq: '0',
      lastError: null,
      finishedAt: null,
      cancelRequestedAt: null,
      errors: [],
      tags: ['a "b"', 'c,d'],
      startBy,
      groupKey: null,
      result: null,
      progress: null,
      logs: [],
    });
    expect(listed.map((j) => j.id)).toEqual(jobs.map((j) => j.id));
    expect(requeued).toBe(1);
    expect(stats.find((s) => s.queue === `${queue}-many` && s.status === 'queued')).toMatchObject({
      count: 3,
    });
  });

  it("a database error keeps the server's SQLSTATE and message", async () => {
    const error = await stack()
      .direct.query('SELECT 1 / $1::int AS x', [0])
      .catch((e: unknown) => translateError(e));
    expect(error).toBeInstanceOf(DatabaseError);
    expect([(error as DatabaseError).sqlState, (error as DatabaseError).message]).toEqual([
      '22012',
      'division by zero (SQLSTATE 22012)',
    ]);
  });

  it('enqueueMany with unique keys outside a transaction inserts them (each statement commits alone)', async () => {
    const key = `${queue}-direct`;
    const held = await skiplock.enqueue('direct', { n: 0 }, { uniqueKey: `${key}-b` });
    const jobs = await skiplock.enqueueMany(
      [
        { kind: 'direct', payload: { n: 1 }, uniqueKey: `${key}-a` },
        { kind: 'direct', payload: { n: 2 }, uniqueKey: `${key}-b`, onConflict: 'replace' },
        { kind: 'direct', payload: { n: 3 } },
      ],
      { client: stack().direct },
    );
    expect(jobs.map((j) => [j.payload, j.duplicate])).toEqual([
      [{ n: 1 }, false],
      [{ n: 2 }, true],
      [{ n: 3 }, false],
    ]);
    expect(jobs[1]!.id).toBe(held.id);
    const stored = await db.query<{ id: string; payload: unknown }>(
      `SELECT id::text AS id, payload FROM ${db.jobs} WHERE id = ANY($1)`,
      [jobs.map((j) => j.id)],
    );
    expect(Object.fromEntries(stored.map((r) => [r.id, r.payload]))).toEqual({
      [jobs[0]!.id]: { n: 1 },
      [jobs[1]!.id]: { n: 2 },
      [jobs[2]!.id]: { n: 3 },
    });
  });

  it('parameters reach the statement as its casts type them: arrays of booleans, empty, nulls, ids, dates; large and fractional numbers', async () => {
    const at = new Date('2030-01-02T03:04:05.678Z');
    const rows = await stack().transaction(
      async (client) =>
        (
          await client.query(
            `SELECT $1::bool[]::text AS bools, $2::int[]::text AS empty, $3::int[]::text AS nulls,
                    $4::bigint[]::text AS ids, $5::timestamptz[] = ARRAY[$6::timestamptz, NULL] AS dates,
                    $7::text[]::text AS texts, $8::bool AS flag, $9::bigint::text AS big,
                    $10::float8 AS fraction, $11::int[]::text AS ms`,
            [
              [false, true],
              [],
              [null, 2],
              ['9007199254740993', '1'],
              [at, null],
              at.toISOString(),
              ['a"b', 'c\\d', '{e}', 'NULL', null],
              false,
              2 ** 40,
              1.5,
              [2 ** 31 - 1, -1],
            ],
          )
        ).rows,
    );
    expect(rows).toEqual([
      {
        bools: '{f,t}',
        empty: '{}',
        nulls: '{NULL,2}',
        ids: '{9007199254740993,1}',
        dates: true,
        texts: '{"a\\"b","c\\\\d","{e}","NULL",NULL}',
        flag: false,
        big: '1099511627776',
        fraction: 1.5,
        ms: '{2147483647,-1}',
      },
    ]);
  });

  it('every enqueue option goes through, a held key is a duplicate, and the transaction stays usable', async () => {
    const key = `${queue}-key`;
    const runAt = new Date('2031-02-03T04:05:06.789Z');
    const later = new Date('2032-03-04T05:06:07.891Z');
    const { first, skipped, replaced, other, many, rows } = await stack().transaction(async (client) => {
      const first = await skiplock.enqueue(
        'options',
        { v: 1 },
        {
          client,
          queue,
          uniqueKey: key,
          uniqueStates: ['queued', 'running', 'succeeded'],
          priority: 3,
          maxAttempts: 4,
          delayMs: 60_000,
        },
      );
      const skipped = await skiplock.enqueue('options', { v: 2 }, { client, queue, uniqueKey: key });
      const replaced = await skiplock.enqueue(
        'options',
        { v: 3 },
        { client, queue, uniqueKey: key, onConflict: 'replace', runAt, priority: -2, maxAttempts: 7 },
      );
      const other = await skiplock.enqueue('options', { o: 1 }, { client, queue, uniqueKey: `${key}-r` });
      const many = await skiplock.enqueueMany(
        [
          { kind: 'options', payload: { m: 0 }, queue, priority: 5 },
          { kind: 'options', payload: { m: 1 }, queue, uniqueKey: key },
          {
            kind: 'options',
            payload: { m: 2 },
            queue,
            uniqueKey: `${key}-b`,
            delayMs: 1_000,
            maxAttempts: 2,
          },
          {
            kind: 'options',
            payload: { m: 3 },
            uniqueKey: `${key}-r`,
            onConflict: 'replace',
            runAt: later,
            priority: 9,
          },
          {
            kind: 'options',
            payload: { m: 4 },
            uniqueKey: `${key}-c`,
            uniqueStates: ['queued'],
            onConflict: 'replace',
          },
        ],
        { client },
      );
      const { rows } = await client.query('SELECT 1 AS still_usable', []);
      return { first, skipped, replaced, other, many, rows };
    });
    expect(rows).toEqual([{ still_usable: 1 }]);
    expect(first).toEqual({
      id: expect.stringMatching(/^\d+$/),
      kind: 'options',
      queue,
      payload: { v: 1 },
      priority: 3,
      runAt: new Date(first.createdAt.getTime() + 60_000),
      attempts: 0,
      maxAttempts: 4,
      createdAt: expect.any(Date),
      duplicate: false,
    });
    expect(skipped).toEqual({ ...first, duplicate: true });
    const rewritten = { ...first, payload: { v: 3 }, runAt, priority: -2, maxAttempts: 7, duplicate: true };
    expect(replaced).toEqual(rewritten);
    const [plain, held, b, otherReplaced, c] = many;
    expect(plain).toMatchObject({ queue, payload: { m: 0 }, priority: 5, maxAttempts: 20, duplicate: false });
    expect(held).toEqual(rewritten);
    expect(b).toEqual({
      id: expect.stringMatching(/^\d+$/),
      kind: 'options',
      queue,
      payload: { m: 2 },
      priority: 0,
      runAt: new Date(b!.createdAt.getTime() + 1_000),
      attempts: 0,
      maxAttempts: 2,
      createdAt: expect.any(Date),
      duplicate: false,
    });
    expect(otherReplaced).toEqual({
      ...other,
      payload: { m: 3 },
      runAt: later,
      priority: 9,
      duplicate: true,
    });
    expect(c).toMatchObject({ queue: 'default', payload: { m: 4 }, priority: 0, duplicate: false });
    const stored = await db.query(
      `SELECT id::text, payload, priority, run_at, max_attempts, unique_states, unique_lock
       FROM ${db.jobs} WHERE unique_key = ANY($1) ORDER BY id::bigint`,
      [[key, `${key}-r`, `${key}-b`, `${key}-c`]],
    );
    const row = (job: {
      id: string;
      payload: unknown;
      priority: number;
      runAt: Date;
      maxAttempts: number;
    }) => ({
      id: job.id,
      payload: job.payload,
      priority: job.priority,
      run_at: job.runAt,
      max_attempts: job.maxAttempts,
    });
    expect(stored).toEqual([
      { ...row(rewritten), unique_states: ['queued', 'running', 'succeeded'], unique_lock: key },
      { ...row(otherReplaced!), unique_states: ['queued', 'running'], unique_lock: `${key}-r` },
      { ...row(b!), unique_states: ['queued', 'running'], unique_lock: `${key}-b` },
      { ...row(c!), unique_states: ['queued'], unique_lock: `${key}-c` },
    ]);
  });
});
