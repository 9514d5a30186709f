import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type ConflictMode, type EnqueuedJob, type JobOptions, ValidationError } from '../src/index.js';
import { withClient } from './support/client.js';
import { waitFor } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();

async function jobsWithKey(key: string) {
  return db.query<{ id: string; status: string; payload: unknown; unique_lock: string | null }>(
    `SELECT id::text, status, payload, unique_lock FROM ${db.jobs} WHERE unique_key = $1 ORDER BY id::bigint`,
    [key],
  );
}

/** Begins a transaction on `holder` and enqueues a `report` job with `uniqueKey` in it, left uncommitted. */
async function enqueueUncommitted(holder: pg.Client, uniqueKey: string): Promise<EnqueuedJob> {
  await holder.query('BEGIN');
  return skiplock.enqueue('report', { from: 'holder' }, { uniqueKey, client: holder });
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
    await withClient(db.url, async (holder) => {
      const mine = await enqueueUncommitted(holder, 'rb-1');
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
    });
  });

  it('a producer that commits makes the waiting producer a duplicate of its job', async () => {
    await withClient(db.url, async (holder) => {
      const mine = await enqueueUncommitted(holder, 'commit-1');
      const waiting = skiplock.enqueue('report', { from: 'other' }, { uniqueKey: 'commit-1' });
      await new Promise((r) => setImmediate(r));
      await holder.query('COMMIT');
      expect(await waiting).toEqual({ ...mine, duplicate: true });
      expect((await jobsWithKey('commit-1')).map((j) => j.id)).toEqual([mine.id]);
    });
  });

  it("enqueueMany with a key twice in one batch, the second 'replace': the first inserts, the second rewrites it", async () => {
    const runAt = new Date('2031-01-01T00:00:00.000Z');
    const jobs = await skiplock.enqueueMany([
      { kind: 'report', payload: { n: 1 }, uniqueKey: 'batch-replace', delayMs: 60_000, maxAttempts: 3 },
      {
        kind: 'report',
        payload: { n: 2 },
        uniqueKey: 'batch-replace',
        onConflict: 'replace',
        priority: 5,
        runAt,
      },
    ]);
    const first = jobs[0]!;
    expect(jobs).toEqual([
      {
        id: first.id,
        kind: 'report',
        queue: 'default',
        payload: { n: 1 },
        priority: 0,
        runAt: new Date(first.createdAt.getTime() + 60_000),
        attempts: 0,
        maxAttempts: 3,
        createdAt: first.createdAt,
        duplicate: false,
      },
      { ...first, payload: { n: 2 }, priority: 5, runAt, maxAttempts: 20, duplicate: true },
    ]);
    expect(await jobsWithKey('batch-replace')).toEqual([
      { id: first.id, status: 'queued', payload: { n: 2 }, unique_lock: 'batch-replace' },
    ]);
  });

  it("enqueueMany with a key twice in one batch, 'replace' then 'skip': the second is a duplicate of the first as inserted", async () => {
    const jobs = await skiplock.enqueueMany([
      {
        kind: 'report',
        payload: { n: 1 },
        uniqueKey: 'batch-replace-skip',
        onConflict: 'replace',
        priority: 2,
      },
      { kind: 'report', payload: { n: 2 }, uniqueKey: 'batch-replace-skip', priority: 9 },
    ]);
    expect(jobs[1]).toEqual({ ...jobs[0], duplicate: true });
    expect(jobs[0]).toMatchObject({ payload: { n: 1 }, priority: 2, duplicate: false });
    expect(await jobsWithKey('batch-replace-skip')).toEqual([
      { id: jobs[0]!.id, status: 'queued', payload: { n: 1 }, unique_lock: 'batch-replace-skip' },
    ]);
  });

  describe.each([
    ['no job holds the key', undefined],
    ['a queued job holds the key', 'queued'],
    ['a running job holds the key', 'running'],
  ] as const)('a batch acts as the same enqueue calls one after another: %s', (_, holder) => {
    const at = (day: number) => new Date(Date.UTC(2031, 0, day));
    const items = (key: string): (JobOptions & { kind: string; payload: unknown })[] =>
      [
        { payload: { n: 1 }, onConflict: 'skip', runAt: at(1), priority: 1 },
        { payload: { n: 2 }, onConflict: 'replace', runAt: at(2), priority: 2, maxAttempts: 4 },
        { payload: { n: 3 }, onConflict: 'skip', runAt: at(3), priority: 3 },
        { payload: { n: 4 }, onConflict: 'replace', runAt: at(4), priority: 4 },
        { payload: { n: 5 }, onConflict: 'skip', runAt: at(5), priority: 5 },
        { payload: { n: 6 }, onConflict: 'replace', runAt: at(6), priority: 6, maxAttempts: 2 },
        { payload: { n: 7 }, onConflict: 'skip', runAt: at(7), priority: 7 },
      ].map((item) => ({
        kind: 'calls',
        uniqueKey: key,
        ...item,
        onConflict: item.onConflict as ConflictMode,
      }));

    async function setUp(key: string) {
      if (!holder) return undefined;
      const job = await skiplock.enqueue('calls', { n: 0 }, { uniqueKey: key, runAt: at(10), priority: 10 });
      if (holder === 'running')
        await db.query(`UPDATE ${db.jobs} SET status = 'running' WHERE id = $1`, [job.id]);
      return job;
    }

    it('each item returns what its own call would have, and the job ends as the calls leave it', async () => {
      const suffix = holder ?? 'free';
      const [batchHolder, callsHolder] = [await setUp(`batch-${suffix}`), await setUp(`calls-${suffix}`)];
      const batch = await skiplock.enqueueMany(items(`batch-${suffix}`));
      const calls: EnqueuedJob[] = [];
      for (const { kind, payload, ...options } of items(`calls-${suffix}`))
        calls.push(await skiplock.enqueue(kind, payload, options));
      // The same outcomes, item by item, but for each key's own job.
      const shape = (job: EnqueuedJob, holderId: string | undefined, firstId: string) => ({
        ...job,
        id: job.id === holderId ? 'holder' : job.id === firstId ? 'first' : job.id,
        createdAt: undefined,
      });
      expect(batch.map((j) => shape(j, batchHolder?.id, batch[0]!.id))).toEqual(
        calls.map((j) => shape(j, callsHolder?.id, calls[0]!.id)),
      );
      expect(new Set(batch.map((j) => j.id)).size).toBe(1);
      const stored = await db.query<{ payload: unknown; priority: number; run_at: Date; status: string }>(
        `SELECT payload, priority, run_at, status FROM ${db.jobs} WHERE unique_key = ANY($1) ORDER BY unique_key`,
        [[`batch-${suffix}`, `calls-${suffix}`]],
      );
      expect(stored[0]).toEqual(stored[1]);
      // What the calls return, spelled out.
      const byPayload = batch.map((j) => [(j.payload as { n: number }).n, j.priority, j.duplicate]);
      // Unless a running job holds the key, each 'replace' rewrites the job and the 'skip' after it sees that.
      const afterTheFirst = [
        [2, 2, true],
        [2, 2, true],
        [4, 4, true],
        [4, 4, true],
        [6, 6, true],
        [6, 6, true],
      ];
      if (holder === undefined) expect(byPayload).toEqual([[1, 1, false], ...afterTheFirst]);
      else if (holder === 'queued') expect(byPayload).toEqual([[0, 10, true], ...afterTheFirst]);
      else expect(byPayload).toEqual(Array.from({ length: 7 }, () => [0, 10, true]));
      expect(stored[0]).toEqual({
        payload: { n: holder === 'running' ? 0 : 6 },
        priority: holder === 'running' ? 10 : 6,
        run_at: holder === 'running' ? at(10) : at(6),
        status: holder ?? 'queued',
      });
    });
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

  it("enqueueMany with keys on the caller's connection outside a transaction inserts them (no savepoint needed)", async () => {
    await withClient(db.url, async (client) => {
      const held = await skiplock.enqueue('report', { n: 0 }, { uniqueKey: 'autocommit-b' });
      const jobs = await skiplock.enqueueMany(
        [
          { kind: 'report', payload: { n: 1 }, uniqueKey: 'autocommit-a' },
          { kind: 'report', payload: { n: 2 }, uniqueKey: 'autocommit-b', onConflict: 'replace' },
          { kind: 'report', payload: { n: 3 }, uniqueKey: 'autocommit-a' },
        ],
        { client },
      );
      expect(jobs.map((j) => [j.payload, j.duplicate])).toEqual([
        [{ n: 1 }, false],
        [{ n: 2 }, true],
        [{ n: 1 }, true],
      ]);
      expect(jobs[1]!.id).toBe(held.id);
      // Committed as they went (seen from another connection); no transaction left open.
      expect((await jobsWithKey('autocommit-a')).map((j) => j.id)).toEqual([jobs[0]!.id]);
      const { rows } = await client.query('SELECT now() = statement_timestamp() AS autocommit');
      expect(rows).toEqual([{ autocommit: true }]);
    });
  });

  it("enqueueMany with keys in the caller's transaction leaves no savepoint behind, and rolls back with it", async () => {
    await withClient(db.url, async (client) => {
      await client.query('BEGIN');
      await client.query('SAVEPOINT mine');
      const jobs = await skiplock.enqueueMany(
        [
          { kind: 'report', payload: { n: 1 }, uniqueKey: 'in-tx-a' },
          { kind: 'report', payload: { n: 2 }, uniqueKey: 'in-tx-b' },
        ],
        { client },
      );
      expect(jobs.map((j) => j.duplicate)).toEqual([false, false]);
      // The caller's own savepoint is still the innermost one.
      await client.query('ROLLBACK TO SAVEPOINT mine');
      await client.query('COMMIT');
      expect(await jobsWithKey('in-tx-a')).toEqual([]);
      expect(await jobsWithKey('in-tx-b')).toEqual([]);
    });
  });

  it("a batch the database fails to break a deadlock starts over from its savepoint, and the caller's transaction goes on", async () => {
    const [mine, other] = [
      new pg.Client({ connectionString: db.url }),
      new pg.Client({ connectionString: db.url }),
    ];
    await Promise.all([mine.connect(), other.connect()]);
    try {
      // PostgreSQL fails the transaction whose deadlock check finds the cycle: the
      // batch's, as it waited first, unless the machine was so slow that its one
      // check ran before the other transaction asked. Then the other is failed
      // instead, and the scenario is set up again with keys of its own.
      for (let attempt = 1; ; attempt++) {
        const [keyA, keyB] = [`deadlock-a-${attempt}`, `deadlock-b-${attempt}`];
        await other.query('BEGIN');
        const b = await skiplock.enqueue('report', { from: 'other' }, { uniqueKey: keyB, client: other });
        await mine.query('BEGIN');
        await mine.query(`INSERT INTO ${db.jobs} (kind) VALUES ('mine-before')`);
        // The batch takes key A, then waits for the other transaction's key B.
        const batch = skiplock.enqueueMany(
          [
            { kind: 'report', payload: { from: 'mine' }, uniqueKey: keyB },
            { kind: 'report', payload: { from: 'mine' }, uniqueKey: keyA },
          ],
          { client: mine },
        );
        batch.catch(() => {});
        const mineWaits = async () => {
          const rows = await db.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
            [(mine as unknown as { processID: number }).processID],
          );
          return rows[0]!.n === 1;
        };
        await waitFor(mineWaits, 10_000, 'the batch to wait for key B');
        // The other transaction now waits for the batch's key A: a cycle. The batch
        // waited first, so the database fails the batch's statement to break it.
        let otherA: Awaited<ReturnType<typeof skiplock.enqueue>>;
        try {
          otherA = await skiplock.enqueue('report', { from: 'other' }, { uniqueKey: keyA, client: other });
        } catch (error) {
          if ((error as { sqlState?: string }).sqlState !== '40P01' || attempt === 5) throw error;
          await other.query('ROLLBACK');
          await batch.catch(() => {});
          await mine.query('ROLLBACK');
          continue;
        }
        expect(otherA.duplicate).toBe(false);
        await other.query('COMMIT');
        const jobs = await batch;
        expect(jobs.map((j) => [j.id, j.duplicate, j.payload])).toEqual([
          [b.id, true, { from: 'other' }],
          [otherA.id, true, { from: 'other' }],
        ]);
        // Nothing the caller did before the batch was undone, and its transaction goes on.
        await mine.query('COMMIT');
        expect(
          await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE kind = 'mine-before'`),
        ).toEqual([{ n: 1 }]);
        return;
      }
    } finally {
      await Promise.all([mine.end(), other.end()]);
    }
  }, 60_000);

  it('a batch whose holder vanishes between its insert and its read goes on key by key and settles every key', async () => {
    // Deterministic stand-in for a worker finishing the holder in between: inserting
    // vanish-b deletes vanish-a's holder, in the batch's own transaction.
    const held = await skiplock.enqueue('holder', { n: 0 }, { uniqueKey: 'vanish-a' });
    await db.query(`CREATE FUNCTION vanish_holder() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN DELETE FROM ${db.jobs} WHERE unique_key = 'vanish-a'; RETURN NULL; END $$`);
    await db.query(`CREATE TRIGGER vanish_holder AFTER INSERT ON ${db.jobs} FOR EACH ROW
      WHEN (NEW.unique_key = 'vanish-b') EXECUTE FUNCTION vanish_holder()`);
    try {
      const jobs = await skiplock.enqueueMany([
        { kind: 'report', payload: { n: 1 }, uniqueKey: 'vanish-b' },
        { kind: 'report', payload: { n: 2 }, uniqueKey: 'vanish-a', onConflict: 'replace' },
        { kind: 'report', payload: { n: 3 }, uniqueKey: 'vanish-c' },
      ]);
      // vanish-a was held when the batch read it: a duplicate of that job, left as it was.
      expect(jobs.map((j) => [j.duplicate, j.payload])).toEqual([
        [false, { n: 1 }],
        [true, { n: 0 }],
        [false, { n: 3 }],
      ]);
      expect(jobs[1]).toEqual({ ...held, duplicate: true });
      expect((await jobsWithKey('vanish-b')).map((j) => j.id)).toEqual([jobs[0]!.id]);
      expect((await jobsWithKey('vanish-c')).map((j) => j.id)).toEqual([jobs[2]!.id]);
      expect(await jobsWithKey('vanish-a')).toEqual([]);
    } finally {
      await db.query(`DROP TRIGGER vanish_holder ON ${db.jobs}`);
      await db.query('DROP FUNCTION vanish_holder()');
    }
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
