/**
 * listArchivedJobs: the archive by kind, queue, days, tags and payload
 * fields, newest first, page after page; jobs archived by a real worker keep
 * their tags and payload; a bad filter is a ValidationError naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/dashboard/index.js';
import { type Skiplock, ValidationError } from '../src/index.js';
import { createTestDatabase, type TestDatabase, waitFor } from './support/database.js';

let db: TestDatabase;
let skiplock: Skiplock;
/** Ids of the jobs archived by the worker, by name. */
const ids: Record<string, string> = {};

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
  const jobs = [
    {
      name: 'a',
      payload: { customerId: 7, order: { total: 10, lines: ['x', 'y'] } },
      tags: ['tenant:7', 'eu'],
    },
    { name: 'b', payload: { customerId: 7, order: { total: 20 } }, tags: ['tenant:7'] },
    { name: 'c', payload: { customerId: 8, order: { total: 10 } }, tags: ['tenant:8', 'eu'] },
    { name: 'd', payload: { customerId: '7' }, tags: undefined },
  ];
  for (const job of jobs) {
    const enqueued = await skiplock.enqueue('search', job.payload, {
      queue: 'archive-search',
      ...(job.tags && { tags: job.tags }),
    });
    ids[job.name] = enqueued.id;
  }
  const worker = skiplock.worker({
    queues: ['archive-search'],
    onSuccess: 'archive',
    pollIntervalMs: 100,
    handlers: { search: () => {} },
  });
  await worker.start();
  try {
    await waitFor(
      async () => (await db.query(`SELECT id FROM ${db.archive}`)).length === jobs.length,
      30_000,
      'every job to be archived',
    );
  } finally {
    await worker.stop();
  }
  // A second day of rows, older, for the day range and the pages.
  await db.query(
    `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                created_at, finished_at, tags)
     SELECT 900000 + g, 'archive-old', 'old', jsonb_build_object('n', g), 'succeeded', 0, now(), 1, 20,
            now(), now() - interval '2 days' - g * interval '1 minute', ARRAY['old']
     FROM generate_series(1, 7) g`,
  );
}, 60_000);
afterAll(async () => {
  await db?.close();
});

/** The archive's ids matching `where`, newest finish first: what a page must hold. */
async function expected(where: string, values: unknown[] = []): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `SELECT id::text FROM ${db.archive} WHERE ${where} ORDER BY finished_at DESC, id DESC`,
    values,
  );
  return rows.map((r) => r.id);
}

describe('listArchivedJobs', () => {
  it('finds archived jobs by tag and by payload field, exactly those', async () => {
    const find = async (filter: Parameters<Skiplock['listArchivedJobs']>[0]) =>
      (await skiplock.listArchivedJobs(filter)).map((j) => j.id).sort();
    const sorted = (...names: string[]) => names.map((n) => ids[n]!).sort();
    expect(await find({ tags: 'tenant:7' })).toEqual(sorted('a', 'b'));
    expect(await find({ tags: ['eu'] })).toEqual(sorted('a', 'c'));
    expect(await find({ tags: ['tenant:7', 'eu'] })).toEqual(sorted('a'));
    expect(await find({ tags: 'tenant:9' })).toEqual([]);
    // JSON containment: a number is not its string, nested objects match as subsets, arrays as sets.
    expect(await find({ payload: { customerId: 7 } })).toEqual(sorted('a', 'b'));
    expect(await find({ payload: { customerId: '7' } })).toEqual(sorted('d'));
    expect(await find({ payload: { order: { total: 10 } } })).toEqual(sorted('a', 'c'));
    expect(await find({ payload: { order: { lines: ['y'] } } })).toEqual(sorted('a'));
    expect(await find({ payload: { customerId: 7 }, tags: 'eu' })).toEqual(sorted('a'));
    expect(await find({ payload: { customerId: 7 }, kind: 'other' })).toEqual([]);
    expect(await find({ payload: { customerId: 7 }, queue: 'archive-search' })).toEqual(sorted('a', 'b'));
  });

  it('returns what the archive row holds, with a payload preview and the row cursor', async () => {
    const [job] = await skiplock.listArchivedJobs({ tags: ['tenant:8'], payloadPreviewChars: 10 });
    const [row] = await db.query<{ finished_at: Date; created_at: Date }>(
      `SELECT finished_at, created_at FROM ${db.archive} WHERE id = $1`,
      [ids.c],
    );
    expect(job).toMatchObject({
      id: ids.c,
      kind: 'search',
      queue: 'archive-search',
      status: 'succeeded',
      attempts: 1,
      tags: ['tenant:8', 'eu'],
      createdAt: row!.created_at,
      finishedAt: row!.finished_at,
      payloadPreview: '{"order": ',
      payloadTruncated: true,
    });
    expect(job!.cursor).toMatch(new RegExp(`^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{6}Z~${ids.c}$`));
    expect(job).not.toHaveProperty('payload');
  });

  it('pages newest first with the cursor, and by a range of finish times', async () => {
    const all = await expected('true');
    const seen: string[] = [];
    let before: string | undefined;
    for (;;) {
      const page = await skiplock.listArchivedJobs({ limit: 3, ...(before !== undefined && { before }) });
      seen.push(...page.map((j) => j.id));
      if (page.length < 3) break;
      before = page.at(-1)!.cursor;
    }
    expect(seen).toEqual(all);
    const since = new Date(Date.now() - 2 * 86_400_000 - 3.5 * 60_000);
    const until = new Date(Date.now() - 86_400_000);
    expect((await skiplock.listArchivedJobs({ since, until })).map((j) => j.id)).toEqual(
      await expected('finished_at >= $1 AND finished_at < $2', [since, until]),
    );
    expect((await skiplock.listArchivedJobs({ tags: 'old', limit: 2 })).map((j) => j.id)).toEqual(
      (await expected(`tags @> '{old}'`)).slice(0, 2),
    );
  });

  it('refuses a bad filter with a ValidationError naming the field', async () => {
    const cases: [unknown, string][] = [
      [{ tags: '' }, 'filter.tags[0]'],
      [{ tags: [] }, 'filter.tags'],
      [{ tags: 5 }, 'filter.tags'],
      [{ tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }, 'filter.tags'],
      [{ payload: [] }, 'filter.payload'],
      [{ payload: 'customerId=7' }, 'filter.payload'],
      [{ payload: null }, 'filter.payload'],
      [{ payload: {} }, 'filter.payload'],
      [{ payload: { when: new Date() } }, 'filter.payload.when'],
      [{ payload: { n: Number.NaN } }, 'filter.payload.n'],
      [{ payload: { text: 'x'.repeat(5000) } }, 'filter.payload'],
      [{ kind: 5 }, 'filter.kind'],
      [{ queue: 'a\u0000b' }, 'filter.queue'],
      [{ since: 'yesterday' }, 'filter.since'],
      [{ until: new Date(Number.NaN) }, 'filter.until'],
      [{ before: 'nonsense' }, 'filter.before'],
      [{ before: '2026-02-30T00:00:00.000000Z~1' }, 'filter.before'],
      [{ before: '2026-01-01T00:00:00.000000Z~0' }, 'filter.before'],
      [{ limit: 0 }, 'filter.limit'],
      [{ limit: 1001 }, 'filter.limit'],
      [{ payloadPreviewChars: 0 }, 'filter.payloadPreviewChars'],
      [{ status: 'dead' }, 'filter.status'],
    ];
    for (const [filter, field] of cases) {
      const error = await skiplock.listArchivedJobs(filter as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(filter)).toBeInstanceOf(ValidationError);
      expect([JSON.stringify(filter), (error as ValidationError).field]).toEqual([
        JSON.stringify(filter),
        field,
      ]);
    }
  });
});

describe('dashboard archive page search', () => {
  const get = async (path: string) => {
    const res = await createDashboard(skiplock, { refreshIntervalMs: 0 }).request(path);
    return { status: res.status, body: await res.text() };
  };
  const rowIds = (body: string) => [...body.matchAll(/data-job-id="(\d+)"/g)].map((m) => m[1]);

  it('filters by tag (repeatable) and by a payload JSON object, with the form keeping them', async () => {
    const byTag = await get('/archive?tag=tenant%3A7');
    expect(byTag.status).toBe(200);
    expect(rowIds(byTag.body)).toEqual(await expected(`tags @> '{tenant:7}'`));
    expect(byTag.body).toContain('name="tag" value="tenant:7"');
    const both = await get('/archive?tag=tenant%3A7&tag=eu');
    expect(rowIds(both.body)).toEqual([ids.a]);
    const payload = encodeURIComponent('{"order": {"total": 10}}');
    const byPayload = await get(`/archive?payload=${payload}`);
    expect(byPayload.status).toBe(200);
    expect(rowIds(byPayload.body)).toEqual(await expected(`payload @> '{"order": {"total": 10}}'`));
    expect(byPayload.body).toContain('value="{&quot;order&quot;: {&quot;total&quot;: 10}}"');
    // A tag links to the archived jobs having it.
    expect(byTag.body).toContain('href="/archive?tag=tenant%3A7"');
  });

  it('answers 400 naming the field to a payload that is not a JSON object, or a bad tag', async () => {
    for (const [path, text] of [
      ['/archive?payload=%7Bnope', 'Unusable payload filter'],
      ['/archive?payload=%5B1%5D', 'Unusable payload filter'],
      ['/archive?payload=%7B%7D', 'Unusable payload filter'],
      [`/archive?tag=${'x'.repeat(101)}`, 'Unusable tag filter'],
    ] as const) {
      const res = await get(path);
      expect([path, res.status, res.body]).toEqual([path, 400, expect.stringContaining(text)]);
    }
  });
});
