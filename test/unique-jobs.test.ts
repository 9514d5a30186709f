import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Skiplock, ValidationError } from '../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from './support/database.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

async function jobsWithKey(key: string) {
  return db.query<{ id: string; status: string; payload: unknown; unique_lock: string | null }>(
    `SELECT id::text, status, payload, unique_lock FROM ${db.jobs} WHERE unique_key = $1 ORDER BY id::bigint`,
    [key],
  );
}

async function lastId(): Promise<bigint> {
  const [row] = await db.query<{ id: string }>(`SELECT max(id)::text AS id FROM ${db.jobs}`);
  return BigInt(row!.id);
}

describe('unique keys', () => {
  it("a held key returns the holding job with duplicate: true, and spends no id ('skip')", async () => {
    const first = await skiplock.enqueue('report', { n: 1 }, { uniqueKey: 'skip-1' });
    expect(first.duplicate).toBe(false);
    for (let i = 2; i <= 20; i++) {
      const again = await skiplock.enqueue('report', { n: i }, { uniqueKey: 'skip-1' });
      expect(again).toEqual({ ...first, duplicate: true });
    }
    expect(await jobsWithKey('skip-1')).toEqual([
      { id: first.id, status: 'queued', payload: { n: 1 }, unique_lock: 'skip-1' },
    ]);
    // Nineteen duplicates later the next insert gets the next id.
    const plain = await skiplock.enqueue('report', { n: 0 });
    expect(plain.duplicate).toBe(false);
    expect(BigInt(plain.id)).toBe(BigInt(first.id) + 1n);
  });

  it('a producer that inserts a key and rolls back lets the waiting producer insert its job', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const mine = await skiplock.enqueue(
        'report',
        { from: 'holder' },
        { uniqueKey: 'rb-1', client: holder },
      );
      let settled = false;
      const waiting = skiplock.enqueue('report', { from: 'other' }, { uniqueKey: 'rb-1' }).finally(() => {
        settled = true;
      });
      // The other insert waits on the uncommitted index entry.
      await waitFor(
        async () => {
          const rows = await db.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
          );
          return rows[0]!.n > 0;
        },
        10_000,
        'the second producer to wait on the first',
      );
      expect(settled).toBe(false);
      await holder.query('ROLLBACK');
      const other = await waiting;
      expect(other.duplicate).toBe(false);
      expect(other.id).not.toBe(mine.id);
      expect(await jobsWithKey('rb-1')).toEqual([
        { id: other.id, status: 'queued', payload: { from: 'other' }, unique_lock: 'rb-1' },
      ]);
    } finally {
      await holder.end();
    }
  });

  it('a producer that commits makes the waiting producer a duplicate of its job', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const mine = await skiplock.enqueue(
        'report',
        { from: 'holder' },
        { uniqueKey: 'commit-1', client: holder },
      );
      const waiting = skiplock.enqueue('report', { from: 'other' }, { uniqueKey: 'commit-1' });
      await new Promise((r) => setImmediate(r));
      await holder.query('COMMIT');
      expect(await waiting).toEqual({ ...mine, duplicate: true });
      expect((await jobsWithKey('commit-1')).map((j) => j.id)).toEqual([mine.id]);
    } finally {
      await holder.end();
    }
  });

  it("enqueueMany with a key twice in one batch, the second 'replace', keeps one job with the second's values", async () => {
    const jobs = await skiplock.enqueueMany([
      { kind: 'report', payload: { n: 1 }, uniqueKey: 'batch-replace', onConflict: 'replace' },
      { kind: 'report', payload: { n: 2 }, uniqueKey: 'batch-replace', onConflict: 'replace', priority: 5 },
    ]);
    expect(jobs.map((j) => [j.id, j.duplicate, j.payload, j.priority])).toEqual([
      [jobs[0]!.id, false, { n: 2 }, 5],
      [jobs[0]!.id, true, { n: 2 }, 5],
    ]);
    expect(await jobsWithKey('batch-replace')).toEqual([
      { id: jobs[0]!.id, status: 'queued', payload: { n: 2 }, unique_lock: 'batch-replace' },
    ]);
  });

  it('enqueueMany with a key twice in one batch inserts one job and reports one duplicate', async () => {
    const jobs = await skiplock.enqueueMany([
      { kind: 'a', payload: { i: 0 }, uniqueKey: 'batch-1' },
      { kind: 'b', payload: { i: 1 } },
      { kind: 'a', payload: { i: 2 }, uniqueKey: 'batch-1' },
      { kind: 'a', payload: { i: 3 }, uniqueKey: 'batch-2' },
    ]);
    expect(jobs.map((j) => [j.kind, j.payload, j.duplicate])).toEqual([
      ['a', { i: 0 }, false],
      ['b', { i: 1 }, false],
      ['a', { i: 0 }, true],
      ['a', { i: 3 }, false],
    ]);
    expect(jobs[2]!.id).toBe(jobs[0]!.id);
    expect((await jobsWithKey('batch-1')).map((j) => j.id)).toEqual([jobs[0]!.id]);
    // A second batch finds both keys held.
    const again = await skiplock.enqueueMany([
      { kind: 'a', payload: {}, uniqueKey: 'batch-2' },
      { kind: 'a', payload: {}, uniqueKey: 'batch-1' },
    ]);
    expect(again.map((j) => [j.id, j.duplicate])).toEqual([
      [jobs[3]!.id, true],
      [jobs[0]!.id, true],
    ]);
  });

  it('a plain SQL insert with the key obeys the unique index', async () => {
    const job = await skiplock.enqueue('report', {}, { uniqueKey: 'sql-1' });
    await expect(
      db.query(`INSERT INTO ${db.jobs} (kind, unique_key) VALUES ('report', 'sql-1')`),
    ).rejects.toMatchObject({ code: '23505' });
    const skipped = await db.query(
      `INSERT INTO ${db.jobs} (kind, unique_key) VALUES ('report', 'sql-1')
       ON CONFLICT (unique_lock) WHERE unique_lock IS NOT NULL DO NOTHING RETURNING id`,
    );
    expect(skipped).toEqual([]);
    // A plain SQL job takes the key from the library's producers too.
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, unique_key) VALUES ('report', 'sql-2') RETURNING id::text`,
    );
    expect(await skiplock.enqueue('report', {}, { uniqueKey: 'sql-2' })).toMatchObject({
      id: row!.id,
      duplicate: true,
    });
    expect((await jobsWithKey('sql-1')).map((j) => j.id)).toEqual([job.id]);
  });

  it('refuses bad unique options, naming the field, and inserts nothing', async () => {
    const before = await lastId();
    const cases: [() => Promise<unknown>, string][] = [
      [() => skiplock.enqueue('k', {}, { uniqueKey: '' }), 'options.uniqueKey'],
      [() => skiplock.enqueue('k', {}, { uniqueKey: 7 as never }), 'options.uniqueKey'],
      [
        () => skiplock.enqueue('k', {}, { uniqueKey: 'x', uniqueStates: ['running'] }),
        'options.uniqueStates',
      ],
      [
        () => skiplock.enqueue('k', {}, { uniqueKey: 'x', uniqueStates: ['queued', 'nope' as never] }),
        'options.uniqueStates[1]',
      ],
      [
        () => skiplock.enqueue('k', {}, { uniqueKey: 'x', onConflict: 'merge' as never }),
        'options.onConflict',
      ],
      [() => skiplock.enqueue('k', {}, { onConflict: 'replace' }), 'options.onConflict'],
      [
        () =>
          skiplock.enqueueMany([
            { kind: 'k', payload: {} },
            { kind: 'k', payload: {}, uniqueStates: [] },
          ]),
        'jobs[1].uniqueStates',
      ],
    ];
    for (const [call, field] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(field);
    }
    expect(await lastId()).toBe(before);
  });
});
