/**
 * The archive partitioned by UTC day of finished_at: the migration keeps every
 * row, partitions are made ahead around midnight and across daylight saving
 * changes, and retention drops only whole expired days (no DELETE, so no dead
 * tuples in what is left).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Skiplock } from '../src/index.js';
import { loadMigrations, migrate } from '../src/migrations/migrator.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, tableIn } from './support/database.js';
import { nextEvent } from './support/events.js';

let db: TestDatabase;
let schemas = 0;

beforeAll(async () => {
  db = await createTestDatabase(false);
});
afterAll(async () => {
  await db?.close();
});

/** A schema of its own for one test, migrated up to `version` (all when left out). */
async function schemaAt(version = Number.POSITIVE_INFINITY) {
  const schema = `${TEST_SCHEMA}_ap${++schemas}`;
  // The function files come with the newest version only: an older one stops without them.
  const migrations = loadMigrations().filter((m) => m.version <= version);
  await migrate(db.pool, schema, migrations, version === Number.POSITIVE_INFINITY ? undefined : []);
  return { schema, archive: tableIn(schema, 'jobs_archive') };
}

/** Inserts archived rows with ids `from`..`to`, finished at `finishedAt` (SQL over g, the id). */
async function seedArchive(archive: string, from: number, to: number, finishedAt: string) {
  await db.query(
    `INSERT INTO ${archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                             created_at, finished_at, errors)
     SELECT g, 'q' || (g % 3), 'k' || (g % 5), jsonb_build_object('n', g), 'succeeded', g % 7, now(), 1, 20,
            now(), ${finishedAt}, CASE WHEN g % 11 = 0 THEN '[{"attempt":1}]'::jsonb END
     FROM generate_series($1::int, $2::int) g`,
    [from, to],
  );
}

/** The archive's partitions, by name, with their row counts. */
async function partitions(schema: string): Promise<Record<string, number>> {
  const names = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = $1::regclass ORDER BY 1`,
    [tableIn(schema, 'jobs_archive')],
  );
  const result: Record<string, number> = {};
  for (const { name } of names) {
    const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${tableIn(schema, name)}`);
    result[name] = row!.n;
  }
  return result;
}

/** Dead tuples in `table`, read from its pages; 0 when the server lacks pgstattuple. */
async function deadTuples(table: string): Promise<number> {
  try {
    await db.query('CREATE EXTENSION IF NOT EXISTS pgstattuple');
  } catch {
    return 0;
  }
  const [row] = await db.query<{ dead: number }>(
    'SELECT dead_tuple_count::int AS dead FROM pgstattuple($1::regclass)',
    [table],
  );
  return row!.dead;
}

async function upkeep(schema: string, now: string, aheadDays: number, retentionMs: number | null) {
  const [row] = await db.query(
    `SELECT created, dropped, skipped FROM ${tableIn(schema, 'archive_partitions')}($1::timestamptz, $2, $3)`,
    [now, aheadDays, retentionMs],
  );
  return row;
}

describe('the archive migration', () => {
  it('keeps every archived row, each in the partition of its UTC day', async () => {
    const { schema, archive } = await schemaAt(12);
    // 30 days of rows, a few without finished_at, one at the last instant of a day.
    await seedArchive(
      archive,
      1,
      3000,
      `CASE WHEN g % 500 = 0 THEN NULL
            ELSE timestamptz '2026-03-01 00:00:00+00' + (g % 30) * interval '1 day' + (g % 24) * interval '1 hour' END`,
    );
    await seedArchive(archive, 3001, 3001, `timestamptz '2026-03-05 23:59:59.999999+00'`);
    const before = await db.query(`SELECT * FROM ${archive} ORDER BY id`);
    expect(before).toHaveLength(3001);

    // Up to the partitioning migration: later ones may add columns.
    await migrate(
      db.pool,
      schema,
      loadMigrations().filter((m) => m.version <= 13),
      [],
    );

    const after = await db.query(`SELECT * FROM ${archive} ORDER BY id`);
    expect(after).toEqual(before);
    const parts = await partitions(schema);
    expect(parts.jobs_archive_default).toBe(6);
    expect(parts.jobs_archive_p20260301).toBe(98);
    expect(parts.jobs_archive_p20260305).toBe(101);
    const days = Object.keys(parts).filter((name) => /^jobs_archive_p2026(03|04)/.test(name));
    expect(days).toHaveLength(30);
    expect(Object.values(parts).reduce((a, b) => a + b, 0)).toBe(3001);
    // Lookups by id stay index-backed.
    const plan = await db.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (COSTS OFF) SELECT * FROM ${archive} WHERE id = 42`,
    );
    expect(plan.map((r) => r['QUERY PLAN']).join('\n')).not.toMatch(/Seq Scan/);
  });

  it('leaves the success archive insert working', async () => {
    const { schema, archive } = await schemaAt();
    const skiplock = new Skiplock({ pool: db.pool, schema });
    const { id } = await skiplock.enqueue('k', { a: 1 });
    const worker = skiplock.worker({
      handleSignals: false,
      onSuccess: 'archive',
      handlers: { k: async () => {} },
    });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;
    await worker.stop();
    const rows = await db.query(`SELECT id::text, status, payload FROM ${archive}`);
    expect(rows).toEqual([{ id, status: 'succeeded', payload: { a: 1 } }]);
    const [where] = await db.query<{ part: string }>(
      `SELECT tableoid::regclass::text AS part FROM ${archive} WHERE id = $1`,
      [id],
    );
    expect(where!.part).toMatch(/jobs_archive_p\d{8}$/);
    await skiplock.close();
  });
});

describe('partition upkeep', () => {
  it('creates the UTC day of now and the days ahead, around midnight', async () => {
    const { schema } = await schemaAt();
    // The migration made today's partitions; a far-off clock shows what the upkeep adds.
    expect(await upkeep(schema, '2030-06-30 23:59:59.999+00', 1, null)).toEqual({
      created: 2,
      dropped: 0,
      skipped: 0,
    });
    expect(await upkeep(schema, '2030-07-01 00:00:00+00', 1, null)).toEqual({
      created: 1,
      dropped: 0,
      skipped: 0,
    });
    const names = Object.keys(await partitions(schema)).filter((n) => n.startsWith('jobs_archive_p2030'));
    expect(names).toEqual(['jobs_archive_p20300630', 'jobs_archive_p20300701', 'jobs_archive_p20300702']);
    // A row at the last microsecond of a day and one at the next midnight land in their own days.
    const archive = tableIn(schema, 'jobs_archive');
    await seedArchive(archive, 1, 1, `timestamptz '2030-06-30 23:59:59.999999+00'`);
    await seedArchive(archive, 2, 2, `timestamptz '2030-07-01 00:00:00+00'`);
    const rows = await db.query(
      `SELECT a.id::int, c.relname AS part FROM ${archive} a JOIN pg_class c ON c.oid = a.tableoid ORDER BY a.id`,
    );
    expect(rows).toEqual([
      { id: 1, part: 'jobs_archive_p20300630' },
      { id: 2, part: 'jobs_archive_p20300701' },
    ]);
  });

  it('takes UTC days whatever the session time zone, across daylight saving changes', async () => {
    const { schema } = await schemaAt();
    const client = await db.pool.connect();
    try {
      await client.query(`SET TIME ZONE 'America/New_York'`);
      // 2031-03-09: New York springs forward; 2031-11-02: it falls back. Local
      // late evening is already the next UTC day.
      const call = `SELECT created FROM ${tableIn(schema, 'archive_partitions')}($1::timestamptz, 0, NULL)`;
      await client.query(call, ['2031-03-08 23:30:00']);
      await client.query(call, ['2031-03-09 21:00:00']);
      await client.query(call, ['2031-11-01 20:30:00']);
      await client.query(call, ['2031-11-02 20:30:00']);
      const { rows } = await client.query<{ name: string; bound: string }>(
        `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass AND c.relname LIKE 'jobs_archive_p2031%' ORDER BY 1`,
        [tableIn(schema, 'jobs_archive')],
      );
      await client.query(`SET TIME ZONE 'UTC'`);
      expect(rows.map((r) => r.name)).toEqual([
        'jobs_archive_p20310309',
        'jobs_archive_p20310310',
        'jobs_archive_p20311102',
        'jobs_archive_p20311103',
      ]);
      // Every partition spans exactly 24 hours of UTC.
      const spans = await db.query<{ hours: number }>(
        `SELECT EXTRACT(EPOCH FROM (m[2]::timestamptz - m[1]::timestamptz)) / 3600 AS hours
         FROM unnest($1::text[]) b, regexp_match(b, 'FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)') m`,
        [rows.map((r) => r.bound)],
      );
      expect(spans.map((r) => Number(r.hours))).toEqual([24, 24, 24, 24]);
    } finally {
      client.release();
    }
  });

  it('moves rows archived on a day without a partition out of the default when the day is made', async () => {
    const { schema, archive } = await schemaAt();
    await seedArchive(archive, 1, 10, `timestamptz '2032-01-10 12:00:00+00'`);
    await seedArchive(archive, 11, 12, 'NULL');
    expect((await partitions(schema)).jobs_archive_default).toBe(12);
    expect(await upkeep(schema, '2032-01-10 08:00:00+00', 0, null)).toMatchObject({ created: 1 });
    const parts = await partitions(schema);
    expect(parts.jobs_archive_default).toBe(2);
    expect(parts.jobs_archive_p20320110).toBe(10);
  });

  it('drops only whole expired days, leaving the rest untouched', async () => {
    const { schema, archive } = await schemaAt();
    // The days made ahead by the migration (today's) all ended before then.
    expect(await upkeep(schema, '2033-05-01 00:00:00+00', 4, 0)).toEqual({
      created: 5,
      dropped: 8,
      skipped: 0,
    });
    // 100 rows an hour over 2033-05-01..05-04 (UTC): 2400 a day.
    await seedArchive(
      archive,
      1,
      9600,
      `timestamptz '2033-05-01 00:00:00+00' + ((g - 1) / 100) * interval '1 hour' + (g % 100) * interval '1 second'`,
    );
    const before = await partitions(schema);
    expect(before.jobs_archive_p20330501).toBe(2400);

    // Retention 2 days at 05-04 12:00: only 05-01 ended before 05-02 12:00.
    const twoDays = 2 * 86_400_000;
    expect(await upkeep(schema, '2033-05-04 12:00:00+00', 0, twoDays)).toEqual({
      created: 0,
      dropped: 1,
      skipped: 0,
    });
    // Exactly at the end of 05-02 plus two days, 05-02 goes too; 05-03 does not.
    expect(await upkeep(schema, '2033-05-05 00:00:00+00', 0, twoDays)).toMatchObject({ dropped: 1 });
    expect(await upkeep(schema, '2033-05-05 23:59:59.999+00', 0, twoDays)).toMatchObject({ dropped: 0 });
    const after = await partitions(schema);
    expect(after.jobs_archive_p20330501).toBeUndefined();
    expect(after.jobs_archive_p20330502).toBeUndefined();
    expect(after.jobs_archive_p20330503).toBe(2400);
    expect(after.jobs_archive_p20330504).toBe(2400);
    const [left] = await db.query<{ n: number; first: number }>(
      `SELECT count(*)::int AS n, min(id)::int AS first FROM ${archive}`,
    );
    expect(left).toEqual({ n: 4800, first: 4801 });
    // Nothing was deleted row by row: what is left has no dead tuples (counted
    // by pgstattuple, which reads the table, not lagging statistics).
    for (const day of ['jobs_archive_p20330503', 'jobs_archive_p20330504']) {
      expect(await deadTuples(tableIn(schema, day))).toBe(0);
    }
  });

  it('prune() drops expired days, then deletes the older rows left in batches', async () => {
    const { schema, archive } = await schemaAt();
    const skiplock = new Skiplock({ pool: db.pool, schema });
    await db.query(
      `SELECT ${tableIn(schema, 'archive_partition')}(((now() - interval '3 days') AT TIME ZONE 'UTC')::date)`,
    );
    await seedArchive(
      archive,
      1,
      1500,
      `date_trunc('day', now() - interval '3 days', 'UTC') + interval '1 hour'`,
    );
    await seedArchive(archive, 1501, 1600, `now() - interval '1 hour'`);
    await seedArchive(archive, 1601, 1650, `now() - interval '10 minutes'`);
    const result = await skiplock.prune({ retention: { archive: 30 * 60_000 } });
    expect(result).toEqual({ jobs: 0, archive: 100, archivePartitions: 1 });
    expect(await db.query(`SELECT count(*)::int AS n, min(id)::int AS first FROM ${archive}`)).toEqual([
      { n: 50, first: 1601 },
    ]);
    await skiplock.close();
  });

  it("a worker's maintenance keeps partitions ahead and drops expired days by the archive retention", async () => {
    const { schema, archive } = await schemaAt();
    const skiplock = new Skiplock({ pool: db.pool, schema });
    await db.query(`SELECT ${tableIn(schema, 'archive_partition')}('2020-01-01')`);
    await seedArchive(archive, 1, 5, `timestamptz '2020-01-01 10:00:00+00'`);
    const worker = skiplock.worker({
      handleSignals: false,
      maintenanceOnly: true,
      handlers: {},
      retention: { archive: 86_400_000 },
    });
    const changed = nextEvent(worker, 'worker:archive');
    await worker.start();
    const [result] = await changed;
    expect(result).toMatchObject({ dropped: 1, skipped: 0 });
    await worker.stop();
    expect(Object.keys(await partitions(schema)).filter((n) => n.startsWith('jobs_archive_p2020'))).toEqual(
      [],
    );
    const [ahead] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = $1::regclass
         AND c.relname >= 'jobs_archive_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')
         AND c.relname <> 'jobs_archive_default'`,
      [archive],
    );
    expect(ahead!.n).toBeGreaterThanOrEqual(8);
    await skiplock.close();
  });
});
