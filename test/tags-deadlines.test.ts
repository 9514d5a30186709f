/** Tags (validation, filters of listJobs, cancel and requeue) and start deadlines (startBy, startWithinMs). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JobQueries } from '../src/db/queries/jobs.js';
import { type JobRecord, ValidationError } from '../src/index.js';
import { quoteIdent, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

/** A valid tag: 1–100 characters of storable text. */
const tag = fc
  .string({ minLength: 1, maxLength: 100, unit: 'grapheme' })
  .filter((s) => !s.includes('\u0000') && [...s].length <= 100);

/** An invalid `tags` value, and the field its error must name (relative to the tags field). */
const invalidTags: fc.Arbitrary<{ tags: unknown; field: string }> = fc.oneof(
  // Not an array at all.
  fc
    .oneof(fc.string(), fc.integer(), fc.constant(null), fc.object(), fc.boolean())
    .map((tags) => ({ tags, field: '' })),
  // More than 20 tags.
  fc.uniqueArray(tag, { minLength: 21, maxLength: 30 }).map((tags) => ({ tags, field: '' })),
  // One bad element among good ones, at a random place.
  fc
    .tuple(
      fc.uniqueArray(tag, { maxLength: 19 }),
      fc.nat(),
      fc.oneof(
        fc.constant(''),
        fc.string({ minLength: 101, maxLength: 300 }).filter((s) => [...s].length > 100),
        fc.string().map((s) => `${s}\u0000`),
        fc.constant('\uD800'),
        fc.integer(),
        fc.constant(null),
        fc.constant(undefined),
        fc.array(fc.string()),
      ),
    )
    .map(([good, at, bad]) => {
      const i = at % (good.length + 1);
      return { tags: [...good.slice(0, i), bad, ...good.slice(i)], field: `[${i}]` };
    }),
  // A tag given twice: the error names the repeat.
  fc.tuple(fc.uniqueArray(tag, { minLength: 1, maxLength: 19 }), fc.nat(), fc.nat()).map(([good, a, b]) => {
    const repeated = good[a % good.length]!;
    const i = good.indexOf(repeated) + 1 + (b % (good.length - good.indexOf(repeated)));
    return { tags: [...good.slice(0, i), repeated, ...good.slice(i)], field: `[${i}]` };
  }),
);

async function expectValidationError(call: () => Promise<unknown>, field: string) {
  const error = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ValidationError);
  expect((error as ValidationError).field).toBe(field);
}

describe('tags on enqueue', () => {
  it('refuses every invalid tags value with a ValidationError naming the field, inserting nothing', async () => {
    await fc.assert(
      fc.asyncProperty(invalidTags, async ({ tags, field }) => {
        await expectValidationError(
          () => t.skiplock.enqueue('k', {}, { tags: tags as string[] }),
          `options.tags${field}`,
        );
        await expectValidationError(
          () =>
            t.skiplock.enqueueMany([
              { kind: 'k', payload: {} },
              { kind: 'k', payload: {}, tags: tags as string[] },
            ]),
          `jobs[1].tags${field}`,
        );
      }),
      { numRuns: 150 },
    );
    expect(await t.jobCount()).toBe(0);
  });

  it('stores tags as given, in order; an empty array is no tags', async () => {
    const tags = ["o'reilly", 'DROP TABLE jobs;--', 'ünï cødé 🎉', 'x'.repeat(100)];
    const job = await t.skiplock.enqueue('k', {}, { tags });
    expect((await t.skiplock.getJob(job.id))?.tags).toEqual(tags);
    const plain = await t.skiplock.enqueue('k', {}, { tags: [] });
    expect((await t.skiplock.getJob(plain.id))?.tags).toEqual([]);
    const [row] = await t.query<{ tags: string[] | null }>(`SELECT tags FROM ${t.jobs} WHERE id = $1`, [
      plain.id,
    ]);
    expect(row?.tags).toBeNull();
  });

  it('enqueueMany keeps each item’s tags and deadline with its own row', async () => {
    const startBy = new Date(Date.now() + 3_600_000);
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'k', payload: { n: 0 } },
      { kind: 'k', payload: { n: 1 }, tags: ['a', 'b'] },
      { kind: 'k', payload: { n: 2 }, startBy },
      { kind: 'k', payload: { n: 3 }, tags: ['c'], startWithinMs: 60_000 },
      { kind: 'k', payload: { n: 4 }, uniqueKey: 'u4', tags: ['d'] },
    ]);
    const read = await Promise.all(jobs.map((j) => t.skiplock.getJob(j.id)));
    expect(read.map((r) => r?.tags)).toEqual([[], ['a', 'b'], [], ['c'], ['d']]);
    expect(read.map((r) => r?.startBy === null)).toEqual([true, true, false, false, true]);
    expect(read[2]?.startBy).toEqual(startBy);
    const [one] = await t.query<{ within_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS within_ms FROM ${t.jobs} WHERE id = $1`,
      [jobs[3]!.id],
    );
    expect(one?.within_ms).toBe(60_000);
  });
});

describe('start deadlines', () => {
  it('computes startWithinMs on the database clock: start_by = the insert time + the interval', async () => {
    const job = await t.skiplock.enqueue('k', {}, { startWithinMs: 5_000 });
    const [row] = await t.query<{ within_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS within_ms FROM ${t.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(row?.within_ms).toBe(5_000);
    const unique = await t.skiplock.enqueue('k', {}, { startWithinMs: 7_000, uniqueKey: 'w' });
    const [urow] = await t.query<{ within_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS within_ms FROM ${t.jobs} WHERE id = $1`,
      [unique.id],
    );
    expect(urow?.within_ms).toBe(7_000);
  });

  it('refuses bad deadlines with a ValidationError naming the field, inserting nothing', async () => {
    const at = new Date(Date.now() + 60_000);
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { startBy: at, startWithinMs: 1 }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { startWithinMs: -1 }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { startWithinMs: Number.NaN }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { startBy: new Date(Number.NaN) }),
      'options.startBy',
    );
    await expectValidationError(
      () => t.skiplock.enqueueMany([{ kind: 'k', payload: {}, startBy: at, startWithinMs: 5 }]),
      'jobs[0].startWithinMs',
    );
    // A deadline before the job is due, or at that very instant: it could never start.
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { runAt: new Date(at.getTime() + 1), startBy: at }),
      'options.startBy',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { runAt: at, startBy: at }),
      'options.startBy',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { delayMs: 10_000, startWithinMs: 5_000 }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { delayMs: 5_000, startWithinMs: 5_000 }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { startWithinMs: 0 }),
      'options.startWithinMs',
    );
    await expectValidationError(
      () => t.skiplock.enqueue('k', {}, { runAt: new Date(), startWithinMs: 0 }),
      'options.startWithinMs',
    );
    expect(await t.jobCount()).toBe(0);
    await t.skiplock.enqueue('k', {}, { runAt: at, startBy: new Date(at.getTime() + 1) });
    await t.skiplock.enqueue('k', {}, { delayMs: 5_000, startWithinMs: 5_001 });
    await t.skiplock.enqueue('k', {}, { startWithinMs: 1 });
    expect(await t.jobCount()).toBe(3);
  });

  it('never runs an expired job: a worker leaves it, the sweeper ends it cancelled, expired', async () => {
    const startBy = new Date(Date.now() - 1_000);
    const expired = await t.skiplock.enqueue('work', { n: 1 }, { startBy, tags: ['e'] });
    // A deadline of now on the client's clock (taken as given): past by the time it is inserted.
    const atOnce = await t.skiplock.enqueue('work', { n: 2 }, { startBy: new Date() });
    const inTime = await t.skiplock.enqueue('work', { n: 3 }, { startWithinMs: 600_000 });
    const ran: unknown[] = [];
    const worker = t.worker({
      handlers: {
        work: async (job) => {
          ran.push(job.payload);
        },
      },
      pollIntervalMs: 100,
      sweepIntervalMs: 200,
      onSuccess: 'keep',
    });
    const sweeps: unknown[] = [];
    worker.on('worker:sweep', (result) => sweeps.push(result));
    await worker.start();
    await waitFor(
      async () =>
        (await t.jobCount(`status = 'cancelled'`)) === 2 && (await t.jobCount(`status = 'succeeded'`)) === 1,
      30_000,
      'two jobs expired and one run',
      () => t.query(`SELECT id, status, last_error FROM ${t.jobs} ORDER BY id`),
    );
    expect(ran).toEqual([{ n: 3 }]);
    // Expiries are reported by worker:sweep, as reclaims are (both jobs in one sweep, or one each).
    await waitFor(
      () => sweeps.reduce<number>((n, r) => n + (r as { expired: number }).expired, 0) === 2,
      30_000,
      'worker:sweep reporting both expiries',
      () => Promise.resolve(sweeps),
    );
    for (const result of sweeps) expect(result).toMatchObject({ requeued: 0, dead: 0 });
    const job = (await t.skiplock.getJob(expired.id)) as JobRecord;
    expect(job).toMatchObject({
      status: 'cancelled',
      attempts: 0,
      lastError: `expired: not started by ${startBy.toISOString()}`,
      startBy,
      tags: ['e'],
    });
    expect(job.finishedAt).toBeInstanceOf(Date);
    expect((await t.skiplock.getJob(atOnce.id))?.lastError).toMatch(
      /^expired: not started by \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/,
    );
    expect((await t.skiplock.getJob(inTime.id))?.status).toBe('succeeded');
  });

  it('ends a job nobody would ever claim as expired, with no worker at all', async () => {
    const startBy = new Date(Date.now() - 5_000);
    const job = await t.skiplock.enqueue('no_handler_anywhere', {}, { startBy, queue: 'nobody' });
    const [plain] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, start_by) VALUES ('plain', now() - interval '1 second') RETURNING id`,
    );
    // Not yet due: left queued.
    const later = await t.skiplock.enqueue('k', {}, { startWithinMs: 600_000 });
    // A job waiting to retry whose deadline passed: a retry is a new start, so it expires.
    const [retrying] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, attempts, last_error, run_at, start_by)
       VALUES ('k', 0, NULL, now() + interval '1 hour', now() - interval '1 second') RETURNING id`,
    );
    // The result counts the expired jobs, so a caller sees what the sweep did.
    expect(await t.skiplock.sweep()).toEqual({ locked: true, requeued: 0, dead: 0, expired: 3 });
    expect(await t.row(job.id)).toEqual({
      status: 'cancelled',
      attempts: 0,
      locked_by: null,
      last_error: `expired: not started by ${startBy.toISOString()}`,
    });
    expect((await t.row(plain!.id))?.status).toBe('cancelled');
    expect((await t.row(retrying!.id))?.status).toBe('cancelled');
    expect((await t.row(later.id))?.status).toBe('queued');
    // A requeue clears the deadline: the job can run again.
    expect(await t.skiplock.requeue({ ids: [job.id] })).toBe(1);
    expect(await t.skiplock.getJob(job.id)).toMatchObject({
      status: 'queued',
      startBy: null,
      lastError: null,
    });
  });

  it('is never handed out by the claim statements, ordinary or limited', async () => {
    const queries = new JobQueries(t.schema);
    await t.skiplock.setQueueLimits('limited', { concurrency: 5 });
    for (const queue of ['plain', 'limited']) {
      await t.query(
        `INSERT INTO ${t.jobs} (kind, queue, start_by) VALUES ('k', $1, now() - interval '1 millisecond')`,
        [queue],
      );
    }
    const inTime = await t.skiplock.enqueue('k', {}, { queue: 'plain', startWithinMs: 600_000 });
    const request = { kinds: ['k'], limit: 10, workerId: 'w', visibilityTimeoutMs: 60_000 };
    const claimed = await queries.claim.claim(t.db.pool, { ...request, queues: ['plain'] });
    expect(claimed.map((j) => j.id)).toEqual([inTime.id]);
    expect(await queries.claim.claim(t.db.pool, { ...request, queues: ['plain', 'other'] })).toEqual([]);
    const limited = await queries.limitedClaim.claim(t.db.pool, { ...request, queues: ['limited'] });
    expect(limited.jobs).toEqual([]);
    expect(await t.jobCount(`status = 'queued'`)).toBe(2);
  });

  it('runs a job claimed in time; its retry past the deadline expires instead of running', async () => {
    // Long enough for a slow worker start to claim it in time.
    const job = await t.skiplock.enqueue('flaky', {}, { startWithinMs: 10_000 });
    let calls = 0;
    const worker = t.worker({
      handlers: {
        flaky: {
          backoff: 3_600_000,
          handle: () => {
            calls++;
            throw new Error('not yet');
          },
        },
      },
      pollIntervalMs: 100,
    });
    await worker.start();
    await waitFor(
      async () => {
        const row = await t.row(job.id);
        return row?.status === 'queued' && row.attempts === 1;
      },
      30_000,
      'the first attempt failed',
      () => t.row(job.id),
    );
    await worker.stop();
    expect(calls).toBe(1);
    await waitFor(
      async () =>
        (await t.query(`SELECT start_by < now() AS past FROM ${t.jobs} WHERE id = $1`, [job.id]))[0]?.past,
      30_000,
      'the deadline passed',
    );
    await t.skiplock.sweep();
    const read = (await t.skiplock.getJob(job.id)) as JobRecord;
    expect(read).toMatchObject({
      status: 'cancelled',
      attempts: 1,
      lastError: `expired: not started by ${read.startBy?.toISOString()}`,
    });
    expect(read.errors).toHaveLength(1);
    expect(read.errors[0]?.error).toContain('not yet');
    expect(calls).toBe(1);
  });

  it('leaves a job claimed in time to run, and a running job is never expired', async () => {
    const [running] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, status, attempts, locked_at, locked_by, start_by)
       VALUES ('k', 'running', 1, now(), 'w', now() - interval '1 minute') RETURNING id`,
    );
    await t.skiplock.sweep();
    expect(await t.row(running!.id)).toEqual({
      status: 'running',
      attempts: 1,
      locked_by: 'w',
      last_error: null,
    });
  });
});

describe('tag filters', () => {
  async function seed() {
    const make = (tags: string[], status = 'queued') =>
      t.query<{ id: string }>(
        `INSERT INTO ${t.jobs} (kind, tags, status, finished_at)
         VALUES ('k', $1::text[], $2, CASE WHEN $2 = 'queued' THEN NULL ELSE now() END) RETURNING id`,
        [tags.length === 0 ? null : tags, status],
      );
    const ids: Record<string, string> = {};
    for (const [name, tags, status] of [
      ['ab', ['a', 'b'], 'queued'],
      ['a', ['a'], 'queued'],
      ['b', ['b'], 'queued'],
      ['none', [], 'queued'],
      ['abDead', ['a', 'b', 'c'], 'dead'],
      ['aFailed', ['a'], 'failed'],
      ['bDead', ['b'], 'dead'],
    ] as const) {
      ids[name] = (await make([...tags], status))[0]!.id;
    }
    return ids;
  }

  it('listJobs returns exactly the jobs having every given tag', async () => {
    const ids = await seed();
    const list = async (tags: string | string[], extra = {}) =>
      ((await t.skiplock.listJobs({ tags, order: 'oldest', ...extra })) as JobRecord[]).map((j) => j.id);
    expect(await list('a')).toEqual([ids.ab, ids.a, ids.abDead, ids.aFailed]);
    expect(await list(['a', 'b'])).toEqual([ids.ab, ids.abDead]);
    expect(await list(['b', 'a'])).toEqual([ids.ab, ids.abDead]);
    expect(await list(['a', 'zzz'])).toEqual([]);
    expect(await list('a', { status: 'queued' })).toEqual([ids.ab, ids.a]);
    expect(await list('b', { payloadPreviewChars: 10 })).toEqual([ids.ab, ids.b, ids.abDead, ids.bDead]);
  });

  it('cancel and requeue act on exactly the jobs having every given tag', async () => {
    const ids = await seed();
    expect(await t.skiplock.cancel({ tags: ['a', 'b'] })).toEqual({ cancelled: 1, running: 0 });
    expect((await t.row(ids.ab!))?.status).toBe('cancelled');
    expect(await t.jobCount(`status = 'queued'`)).toBe(3);
    expect(await t.skiplock.cancel({ tags: 'a' })).toEqual({ cancelled: 1, running: 0 });
    expect((await t.row(ids.a!))?.status).toBe('cancelled');
    expect(await t.jobCount(`status = 'queued'`)).toBe(2);

    expect(await t.skiplock.requeue({ tags: ['b'] })).toBe(2); // abDead and bDead (cancelled ones only when asked)
    expect(await t.jobCount(`status = 'queued' AND id = ANY($1::bigint[])`, [[ids.abDead, ids.bDead]])).toBe(
      2,
    );
    expect(await t.skiplock.requeue({ tags: 'a', status: ['cancelled', 'failed'] })).toBe(3);
    expect(await t.jobCount(`status = 'queued'`)).toBe(7);
  });

  it('refuses a bad tags filter naming the field', async () => {
    await expectValidationError(() => t.skiplock.listJobs({ tags: [] }), 'filter.tags');
    await expectValidationError(() => t.skiplock.cancel({ tags: ['a', ''] }), 'filter.tags[1]');
    await expectValidationError(() => t.skiplock.requeue({ tags: 3 as unknown as string }), 'filter.tags');
  });

  it('goes through the tags index', async () => {
    await t.query(
      `INSERT INTO ${t.jobs} (kind, tags) SELECT 'k', CASE WHEN g % 1000 = 0 THEN ARRAY['rare'] END
       FROM generate_series(1, 20000) g`,
    );
    await t.query(`ANALYZE ${t.jobs}`);
    const plan = async (sql: string) =>
      (await t.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`)).map((r) => r['QUERY PLAN']).join('\n');
    // The filters' shape, as the statements are planned for their values (sent unnamed).
    expect(
      await plan(`SELECT id FROM ${t.jobs} WHERE tags @> ARRAY['rare'] ORDER BY id DESC LIMIT 100`),
    ).toContain('jobs_tags_idx');
    expect(
      await plan(
        `UPDATE ${t.jobs} SET status = 'cancelled' WHERE status IN ('queued', 'running') AND tags @> ARRAY['rare']`,
      ),
    ).toContain('jobs_tags_idx');
  });
});

describe('the SQL functions', () => {
  const fn = (name: string) => `${quoteIdent(t.schema)}.${name}`;
  const refusal = (sql: string, values: unknown[] = []) =>
    t.query(sql, values).then(
      () => undefined,
      (e: { code?: string; message?: string }) => ({ code: e.code, message: e.message }),
    );

  it('enqueue takes tags and start_by (old calls unchanged); bad tags raise 22023 naming them', async () => {
    const [old] = await t.query<{ id: string }>(`SELECT ${fn('enqueue')}('k', '{}', 'q', 0, now(), 3) AS id`);
    const [tagged] = await t.query<{ id: string }>(
      `SELECT ${fn('enqueue')}('k', tags => ARRAY['a', 'b'], start_by => now() + interval '5 seconds') AS id`,
    );
    const [keyed] = await t.query<{ id: string }>(
      `SELECT ${fn('enqueue')}('k', unique_key => 'u', tags => ARRAY['c'], start_by => $1) AS id`,
      [new Date('2100-01-01T00:00:00Z')],
    );
    const read = async (id: string) => (await t.skiplock.getJob(id)) as JobRecord;
    expect(await read(old!.id)).toMatchObject({ tags: [], startBy: null, maxAttempts: 3 });
    expect(await read(tagged!.id)).toMatchObject({ tags: ['a', 'b'] });
    const [within] = await t.query<{ ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS ms FROM ${t.jobs} WHERE id = $1`,
      [tagged!.id],
    );
    expect(within?.ms).toBe(5_000);
    expect(await read(keyed!.id)).toMatchObject({ tags: ['c'], startBy: new Date('2100-01-01T00:00:00Z') });
    const message = 'tags: must be at most 20 distinct tags of 1 to 100 characters each';
    for (const bad of [
      [''],
      ['a', 'a'],
      ['x'.repeat(101)],
      [null],
      Array.from({ length: 21 }, (_, i) => `t${i}`),
    ]) {
      expect(await refusal(`SELECT ${fn('enqueue')}('k', tags => $1::text[])`, [bad])).toEqual({
        code: '22023',
        message,
      });
    }
    // Plain inserts are held to the table's bounds too.
    for (const bad of [[], [null], Array.from({ length: 21 }, (_, i) => `t${i}`)]) {
      expect(
        await refusal(`INSERT INTO ${t.jobs} (kind, tags) VALUES ('k', $1::text[])`, [bad]),
      ).toMatchObject({
        code: '23514',
      });
    }
    expect(await refusal(`INSERT INTO ${t.jobs} (kind, start_by) VALUES ('k', 'infinity')`)).toMatchObject({
      code: '23514',
    });
    expect(await refusal(`SELECT ${fn('enqueue')}('k', start_by => 'infinity')`)).toEqual({
      code: '22023',
      message: 'start_by: must be a finite time',
    });
    expect(await t.jobCount()).toBe(3);
  });

  it('cancel and requeue filter by tags; sweep ends expired jobs; requeue clears the deadline', async () => {
    const ids = (
      await t.skiplock.enqueueMany([
        { kind: 'k', payload: {}, tags: ['a', 'b'] },
        { kind: 'k', payload: {}, tags: ['a'] },
        { kind: 'k', payload: {}, startBy: new Date(Date.now() - 1_000) },
      ])
    ).map((j) => j.id);
    const [counts] = await t.query(`SELECT * FROM ${fn('cancel')}(tags => ARRAY['b', 'a'])`);
    expect(counts).toEqual({ cancelled: 1, running: 0 });
    expect((await t.row(ids[0]!))?.status).toBe('cancelled');
    expect((await t.row(ids[1]!))?.status).toBe('queued');
    expect(await refusal(`SELECT * FROM ${fn('cancel')}(tags => '{}')`)).toEqual({
      code: '22023',
      message: 'tags: must hold at least one tag',
    });

    const [swept] = await t.query<{ n: number }>(`SELECT ${fn('sweep')}() AS n`);
    expect(swept?.n).toBe(0);
    const expired = (await t.skiplock.getJob(ids[2]!)) as JobRecord;
    expect(expired).toMatchObject({
      status: 'cancelled',
      lastError: `expired: not started by ${expired.startBy?.toISOString()}`,
    });

    const [requeued] = await t.query<{ n: number }>(
      `SELECT ${fn('requeue')}(tags => ARRAY['a'], statuses => ARRAY['cancelled']) AS n`,
    );
    expect(requeued?.n).toBe(1);
    expect((await t.row(ids[0]!))?.status).toBe('queued');
    const [again] = await t.query<{ n: number }>(`SELECT ${fn('requeue')}(ids => ARRAY[$1]::bigint[]) AS n`, [
      ids[2],
    ]);
    expect(again?.n).toBe(1);
    expect(await t.skiplock.getJob(ids[2]!)).toMatchObject({ status: 'queued', startBy: null });
  });
});
