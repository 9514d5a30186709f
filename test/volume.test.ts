/**
 * At volume: with many kept succeeded jobs, many dead letters and a large
 * archive, stats(), queues(), the list pages and the dashboard read through
 * indexes (or a bounded sample, labelled as an estimate), never a whole table.
 * The plans are checked, not the timings (the machine is shared).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/dashboard/index.js';
import { DashboardQueries } from '../src/dashboard/queries.js';
import type { Queryable } from '../src/db/executor.js';
import { JobQueries } from '../src/db/queries/jobs.js';
import type { Skiplock } from '../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, tableIn } from './support/database.js';

let db: TestDatabase;
let skiplock: Skiplock;

const KEPT = 60_000;
const DEAD = 15_000;
const QUEUED = 50;
const ARCHIVED = 100_000;
/** The start of today (UTC), as SQL. */
const MIDNIGHT = `(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`;

/** Archived rows of one customer, spread over the four days. */
const RARE = 60;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
  // Ten queues; succeeded and dead rows finished over the last two days.
  await db.query(
    `INSERT INTO ${db.jobs} (queue, kind, payload, status, attempts, max_attempts, finished_at, last_error)
     SELECT 'v' || (g % 10), 'k' || (g % 7), jsonb_build_object('n', g, 'pad', repeat('x', 100)),
            CASE WHEN g <= $1 THEN 'succeeded' ELSE 'dead' END, 1, 1,
            now() - (g % 172800) * interval '1 second', CASE WHEN g > $1 THEN 'boom' END
     FROM generate_series(1, $1::int + $2::int) g`,
    [KEPT, DEAD],
  );
  await db.query(
    `INSERT INTO ${db.jobs} (queue, kind, payload, run_at, max_attempts)
     SELECT 'v' || (g % 10), 'k1', '{}', now() + interval '1 hour', 20 FROM generate_series(1, $1::int) g`,
    [QUEUED],
  );
  // The archive over the four UTC days before today, each day in its partition
  // (today's is empty: the plans do not depend on the time of day).
  await db.query(
    `SELECT ${tableIn(TEST_SCHEMA, 'archive_partition')}(((now() - d * interval '1 day') AT TIME ZONE 'UTC')::date)
     FROM generate_series(1, 4) d`,
  );
  await db.query(
    `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                created_at, finished_at, tags)
     SELECT 100000000 + g, 'v' || (g % 10), 'k' || (g % 7), jsonb_build_object('n', g, 'customer', 'c' || (g % 500)),
            'succeeded', 0, now(), 1, 20, now(), ${MIDNIGHT} - ((g * 7) % 345600 + 1) * interval '1 second',
            CASE WHEN g % 2 = 0 THEN ARRAY['t' || (g % 1000), 'even'] END
     FROM generate_series(1, $1::int) g`,
    [ARCHIVED],
  );
  await db.query(`VACUUM ANALYZE ${db.jobs}`);
  await db.query(`ANALYZE ${db.archive}`);
  // Rare rows written after ANALYZE: the statistics cannot hold them, so a
  // search for them is planned as the rare search it is whatever the sample.
  await db.query(
    `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                created_at, finished_at)
     SELECT 200000000 + g, 'v1', 'k1', jsonb_build_object('n', -g, 'customer', 'rare'),
            'succeeded', 0, now(), 1, 20, now(), ${MIDNIGHT} - (g * 5000) * interval '1 second'
     FROM generate_series(1, $1::int) g`,
    [RARE],
  );
}, 300_000);
afterAll(async () => {
  await db?.close();
});

/** Records the statement a query method sends instead of running it. */
function recorder() {
  const sent: { text: string; values: unknown[] }[] = [];
  const db: Queryable = {
    query: (async (config: string | { text: string; values?: unknown[] }, values?: unknown[]) => {
      sent.push(
        typeof config === 'string'
          ? { text: config, values: values ?? [] }
          : { text: config.text, values: config.values ?? [] },
      );
      return { rows: [], rowCount: 0 };
    }) as Queryable['query'],
  };
  return { db, sent };
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

/**
 * Tables read whole by `text`'s plan: a Seq Scan, with no Limit above it, on
 * a jobs table or archive partition of more than 50 pages (a small partition
 * is rightly read whole).
 */
async function unboundedScans(text: string, values: unknown[]): Promise<string[]> {
  const [row] = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    `EXPLAIN (FORMAT JSON) ${text}`,
    values,
  );
  const scanned: string[] = [];
  const walk = (node: PlanNode, limited: boolean) => {
    const underLimit = limited || node['Node Type'] === 'Limit';
    const relation = node['Relation Name'] ?? '';
    if (node['Node Type'] === 'Seq Scan' && relation.startsWith('jobs') && !underLimit)
      scanned.push(relation);
    for (const child of node.Plans ?? []) walk(child, underLimit);
  };
  walk(row!['QUERY PLAN'][0].Plan, false);
  const large = await db.query<{ name: string }>(
    `SELECT relname AS name FROM pg_class
     WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND relname = ANY($2::text[]) AND relpages > 50`,
    [TEST_SCHEMA, scanned],
  );
  return large.map((r) => r.name).sort();
}

describe('at volume', () => {
  it('stats() counts queued jobs exactly and estimates large finished groups, saying so', async () => {
    const stats = await skiplock.stats();
    const queued = stats.filter((s) => s.status === 'queued');
    expect(queued.map((s) => [s.count, s.estimated])).toEqual(Array.from({ length: 10 }, () => [5, false]));
    const succeeded = stats.filter((s) => s.status === 'succeeded');
    expect(succeeded.every((s) => s.estimated)).toBe(true);
    const total = succeeded.reduce((n, s) => n + s.count, 0);
    // A sample of about 1000 pages scaled by the table's size: near, not exact.
    expect(total).toBeGreaterThan(KEPT * 0.7);
    expect(total).toBeLessThan(KEPT * 1.3);
    expect(stats.filter((s) => s.status === 'dead').every((s) => s.estimated)).toBe(true);
  });

  it('queues() lists every queue with its exact queued count', async () => {
    const queues = await skiplock.queues();
    expect(queues.map((q) => [q.name, q.queued, q.running])).toEqual(
      Array.from({ length: 10 }, (_, i) => [`v${i}`, 5, 0]),
    );
  });

  it('reads no jobs table whole: stats, queues, list pages, throughput, archive lookups', async () => {
    const queries = new JobQueries(TEST_SCHEMA);
    const { db: rec, sent } = recorder();
    await queries.inspect.stats(rec);
    await queries.queues.list(rec);
    const page = { limit: 50, order: 'newest' as const, after: undefined };
    await queries.inspect.listPreviews(rec, {}, page, 200);
    await queries.inspect.listPreviews(rec, {}, { ...page, after: String(KEPT - 5000) }, 200);
    await queries.inspect.listPreviews(rec, { status: ['dead'] }, page, 200);
    await queries.inspect.listPreviews(rec, { queue: ['v3'] }, page, 200);
    await queries.inspect.getById(rec, '42');
    const dashboard = new DashboardQueries(TEST_SCHEMA);
    const pool = rec as unknown as Parameters<DashboardQueries['throughput']>[0];
    await dashboard.throughput(pool);
    await dashboard.getArchived(pool, '100000042');
    await dashboard.storedJobIds(pool, ['1', '100000042']);
    await queries.archive.list(rec, {}, undefined, 50, 120);
    await queries.archive.list(rec, { kind: 'k3' }, undefined, 50, 120);
    await queries.archive.list(
      rec,
      { queue: 'v3', since: new Date(Date.now() - 2 * 86_400_000) },
      { finishedAt: new Date().toISOString().replace('Z', '000Z'), id: '1' },
      50,
      120,
    );
    await queries.archive.list(rec, { tags: ['t42'] }, undefined, 50, 120);
    await queries.archive.list(rec, { payload: { n: 4242 } }, undefined, 50, 120);
    expect(sent.length).toBe(15);
    for (const { text, values } of sent) {
      expect(await unboundedScans(text, values), text).toEqual([]);
    }
  });

  it('searches the archive by tag and by payload field through its GIN indexes, exact rows', async () => {
    const queries = new JobQueries(TEST_SCHEMA);
    const cases = [
      { filter: { tags: ['t42'] }, where: `tags @> ARRAY['t42']`, index: /_tags_idx$/ },
      { filter: { tags: ['t42', 'even'] }, where: `tags @> ARRAY['t42', 'even']`, index: /_tags_idx$/ },
      {
        filter: { payload: { customer: 'rare' } },
        where: `payload @> '{"customer":"rare"}'`,
        index: /_payload_idx$/,
      },
      { filter: { payload: { n: -42 } }, where: `payload @> '{"n":-42}'`, index: /_payload_idx$/ },
    ];
    for (const { filter, where, index } of cases) {
      const expected = await db.query<{ id: string }>(
        `SELECT id::text FROM ${db.archive} WHERE ${where} ORDER BY finished_at DESC, id DESC LIMIT 50`,
      );
      const page = await queries.archive.list(db.pool, filter, undefined, 50, 120);
      expect(page.map((j) => j.id)).toEqual(expected.map((r) => r.id));
      expect(page.length).toBeGreaterThan(0);
      // Every large day partition is read through the search's GIN index, never whole.
      const { db: rec, sent } = recorder();
      await queries.archive.list(rec, filter, undefined, 50, 120);
      const { text, values } = sent[0]!;
      const [plan] = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode & { 'Index Name'?: string } }] }>(
        `EXPLAIN (FORMAT JSON) ${text}`,
        values,
      );
      const scans: string[] = [];
      const walk = (node: PlanNode & { 'Index Name'?: string }) => {
        if (node['Node Type'].endsWith('Scan') && node['Node Type'] !== 'Function Scan')
          scans.push(`${node['Node Type']} ${node['Index Name'] ?? node['Relation Name']}`);
        for (const child of node.Plans ?? []) walk(child);
      };
      walk(plan!['QUERY PLAN'][0].Plan);
      const onIndex = scans.filter((s) => s.startsWith('Bitmap Index Scan'));
      expect(onIndex.length, `${where}\n${scans.join('\n')}`).toBeGreaterThanOrEqual(4);
      for (const scan of onIndex) expect(scan).toMatch(index);
      // A Seq Scan is only of a small partition: today's and the empty days ahead.
      const seq = scans.filter((s) => s.startsWith('Seq Scan ')).map((s) => s.slice('Seq Scan '.length));
      const filled = await db.query<{ name: string }>(
        `SELECT relname AS name FROM pg_class
         WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND relname = ANY($2::text[])
           AND relpages > 50`,
        [TEST_SCHEMA, seq],
      );
      expect(filled, scans.join('\n')).toEqual([]);
    }
  });

  it('serves the dashboard pages, estimates marked', async () => {
    const app = createDashboard(skiplock, { refreshIntervalMs: 0 });
    const home = await app.request('/');
    expect(home.status).toBe(200);
    const body = await home.text();
    expect(body).toContain('data-estimated');
    expect(body).toMatch(/≈\d+/);
    for (const path of ['/jobs', '/jobs?status=dead', '/jobs?queue=v3', `/jobs?before=${KEPT - 5000}`]) {
      expect((await app.request(path)).status, path).toBe(200);
    }
    const archived = await app.request('/jobs/100000042');
    expect(archived.status).toBe(200);
    expect(await archived.text()).toContain('100000042');
  });

  it('browses the archive newest first, by kind, queue and days, page after page', async () => {
    const app = createDashboard(skiplock, { refreshIntervalMs: 0 });
    const ids = (body: string) => [...body.matchAll(/data-job-id="(\d+)"/g)].map((m) => m[1]);
    const expected = async (where: string, values: unknown[], offset: number) =>
      (
        await db.query<{ id: string }>(
          `SELECT id::text FROM ${db.archive} WHERE ${where}
           ORDER BY finished_at DESC, id DESC OFFSET ${offset} LIMIT 50`,
          values,
        )
      ).map((r) => r.id);

    const first = await (await app.request('/archive?kind=k3')).text();
    expect(ids(first)).toEqual(await expected('kind = $1', ['k3'], 0));
    const older = /href="([^"]+)" rel="next"/.exec(first)![1]!.replaceAll('&amp;', '&');
    const second = await (await app.request(older)).text();
    expect(ids(second)).toEqual(await expected('kind = $1', ['k3'], 50));

    const [{ day }] = (await db.query<{ day: string }>(
      `SELECT to_char((now() - interval '2 days') AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day`,
    )) as [{ day: string }];
    const ranged = await (await app.request(`/archive?queue=v3&since=${day}&until=${day}`)).text();
    expect(ids(ranged)).toEqual(
      await expected(
        `queue = 'v3' AND finished_at >= $1::date::timestamp AT TIME ZONE 'UTC'
         AND finished_at < ($1::date + 1)::timestamp AT TIME ZONE 'UTC'`,
        [day],
        0,
      ),
    );
    expect(ids(ranged)).toHaveLength(50);
    expect((await app.request('/archive?since=yesterday')).status).toBe(400);
    expect((await app.request('/archive?before=nonsense')).status).toBe(400);
  });
});
