/**
 * Dependencies between jobs (dependsOn): a child waits until every parent has
 * ended, is released exactly once in the transaction that ends the last one,
 * and is cancelled (with its own children) when a parent fails, unless it
 * said onParentFailure 'run'.
 */
import type { ChildProcess } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { quoteIdent } from '../src/db/sql.js';
import { type Job, PermanentError, type TransactionalHandlerContext, ValidationError } from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { waitFor, waitForBlockedBy } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { killedAfterTest, startWorkerProcess } from './support/processes.js';

const t = useTestDatabase();

/** What `promise` rejected with (it must reject). */
async function thrown(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

/** Status and last_error of jobs by id. */
async function states(...ids: string[]): Promise<Record<string, string>> {
  const rows = await t.query<{ id: string; status: string; last_error: string | null }>(
    `SELECT id, status, last_error FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  // The first line of last_error (a thrown Error's stack follows it).
  return Object.fromEntries(
    rows.map((r) => [r.id, r.last_error ? `${r.status}: ${r.last_error.split('\n')[0]}` : r.status]),
  );
}

describe('dependsOn', () => {
  it('a diamond runs in order: the fan-in job starts after both branches ended', async () => {
    const [a, b, c, d] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: { name: 'a' }, ref: 'a' },
      { kind: 'step', payload: { name: 'b' }, ref: 'b', dependsOn: ['a'] },
      { kind: 'step', payload: { name: 'c' }, ref: 'c', dependsOn: ['a'] },
      { kind: 'step', payload: { name: 'd' }, dependsOn: ['b', 'c'] },
    ]);
    expect(await states(a!.id, b!.id, c!.id, d!.id)).toEqual({
      [a!.id]: 'queued',
      [b!.id]: 'waiting',
      [c!.id]: 'waiting',
      [d!.id]: 'waiting',
    });
    expect((await t.skiplock.stats()).map((s) => [s.queue, s.status, s.count, s.estimated])).toEqual([
      ['default', 'queued', 1, false],
      ['default', 'waiting', 3, false],
    ]);
    expect((await t.skiplock.getJob(d!.id))?.dependsOn).toEqual([
      { id: b!.id, kind: 'step', status: 'waiting' },
      { id: c!.id, kind: 'step', status: 'waiting' },
    ]);
    const shownA = await t.skiplock.getJob(a!.id);
    expect(shownA?.children).toEqual([
      { id: b!.id, kind: 'step', status: 'waiting' },
      { id: c!.id, kind: 'step', status: 'waiting' },
    ]);
    expect(shownA?.dependsOn).toBeUndefined();
    const log: string[] = [];
    await t.query('CREATE TABLE step_log (n serial, event text)');
    const worker = t.worker({
      handlers: {
        step: async (job: Job) => {
          await t.query('INSERT INTO step_log (event) VALUES ($1)', [
            `start ${(job.payload as { name: string }).name}`,
          ]);
          await t.query('INSERT INTO step_log (event) VALUES ($1)', [
            `end ${(job.payload as { name: string }).name}`,
          ]);
        },
      },
      concurrency: 4,
      pollIntervalMs: 50,
      onSuccess: 'keep',
    });
    await worker.start();
    await waitFor(async () => (await t.jobCount("status = 'succeeded'")) === 4, 30_000, 'the four jobs');
    for (const r of await t.query<{ event: string }>('SELECT event FROM step_log ORDER BY n'))
      log.push(r.event);
    const at = (event: string) => log.indexOf(event);
    expect(at('end a')).toBeLessThan(at('start b'));
    expect(at('end a')).toBeLessThan(at('start c'));
    expect(at('end b')).toBeLessThan(at('start d'));
    expect(at('end c')).toBeLessThan(at('start d'));
    expect(log).toHaveLength(8);
  });

  it('enqueue with dependsOn: a parent already succeeded counts as ended; an unknown id is a ValidationError', async () => {
    const parent = await t.skiplock.enqueue('step', {});
    await t.query(`UPDATE ${t.jobs} SET status = 'succeeded', finished_at = now() WHERE id = $1`, [
      parent.id,
    ]);
    const child = await t.skiplock.enqueue('step', {}, { dependsOn: [parent.id] });
    expect(await states(child.id)).toEqual({ [child.id]: 'queued' });

    const error = await thrown(t.skiplock.enqueue('step', {}, { dependsOn: [parent.id, '999999'] }));
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('options.dependsOn[1]');
    expect(await t.jobCount()).toBe(2);
    const error2 = await thrown(t.skiplock.enqueue('step', {}, { dependsOn: ['x'] }));
    expect((error2 as ValidationError).field).toBe('options.dependsOn[0]');
  });

  it('a child released by its parents keeps the delay or run_at it was enqueued with', async () => {
    const [parent, delayed, plain] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, ref: 'p' },
      { kind: 'step', payload: {}, dependsOn: ['p'], delayMs: 3_600_000 },
      { kind: 'step', payload: {}, dependsOn: ['p'] },
    ]);
    const [sql] = await t.query<{ id: string }>(
      `SELECT ${quoteIdent(t.schema)}.enqueue('step', '{}', depends_on => ARRAY[$1::bigint],
                                            run_at => now() + interval '2 hours') AS id`,
      [parent!.id],
    );
    const ran: string[] = [];
    await drain(t.skiplock, { step: (job: Job) => void ran.push(job.id) }, { onSuccess: 'keep' });
    expect(ran).toEqual([parent!.id, plain!.id]);
    const rows = await t.query<{ id: string; status: string; due_in_s: number }>(
      `SELECT id, status, round(extract(epoch FROM run_at - now()) / 60)::int * 60 AS due_in_s
       FROM ${t.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[delayed!.id, sql!.id]],
    );
    expect(rows).toEqual([
      { id: delayed!.id, status: 'queued', due_in_s: 3600 },
      { id: sql!.id, status: 'queued', due_in_s: 7200 },
    ]);
  });

  it('a child keeps its group key, tags and start deadline', async () => {
    const parent = await t.skiplock.enqueue('step', {});
    const child = await t.skiplock.enqueue(
      'step',
      {},
      { dependsOn: [parent.id], groupKey: 'tenant-7', tags: ['a', 'b'], startWithinMs: 60_000 },
    );
    const rows = await t.query<{ status: string; group_key: string; tags: string[]; deadline_s: number }>(
      `SELECT status, group_key, tags, round(extract(epoch FROM start_by - created_at))::int AS deadline_s
       FROM ${t.jobs} WHERE id = $1`,
      [child.id],
    );
    expect(rows).toEqual([{ status: 'waiting', group_key: 'tenant-7', tags: ['a', 'b'], deadline_s: 60 }]);
  });

  it('a parent that already ended badly: the child starts cancelled naming it, or queued with onParentFailure run', async () => {
    const parent = await t.skiplock.enqueue('step', {});
    await t.query(`UPDATE ${t.jobs} SET status = 'failed', finished_at = now() WHERE id = $1`, [parent.id]);
    const cancelled = await t.skiplock.enqueue('step', {}, { dependsOn: [parent.id] });
    const runs = await t.skiplock.enqueue('step', {}, { dependsOn: [parent.id], onParentFailure: 'run' });
    expect(await states(cancelled.id, runs.id)).toEqual({
      [cancelled.id]: `cancelled: parent job ${parent.id} ended failed`,
      [runs.id]: 'queued',
    });
    await expect(t.skiplock.enqueue('step', {}, { onParentFailure: 'run' })).rejects.toMatchObject({
      field: 'options.onParentFailure',
    });
    await expect(
      t.skiplock.enqueue('step', {}, { dependsOn: [parent.id], uniqueKey: 'k' }),
    ).rejects.toMatchObject({ field: 'options.dependsOn', reason: 'not with a uniqueKey' });
    await expect(t.skiplock.enqueue('step', {}, { dependsOn: [] })).rejects.toMatchObject({
      field: 'options.dependsOn',
    });
  });

  it('a graph with a cycle or an unknown ref is a ValidationError naming the entry, and inserts nothing', async () => {
    const cycle = await thrown(
      t.skiplock.enqueueMany([
        { kind: 'step', payload: {}, ref: 'a', dependsOn: ['c'] },
        { kind: 'step', payload: {}, ref: 'b', dependsOn: ['a'] },
        { kind: 'step', payload: {}, ref: 'c', dependsOn: ['b'] },
        { kind: 'step', payload: {}, ref: 'd' },
      ]),
    );
    expect(cycle).toBeInstanceOf(ValidationError);
    expect((cycle as ValidationError).field).toBe('jobs[0].dependsOn[0]');
    expect((cycle as ValidationError).reason).toBe('forms a cycle');
    // An item below a cycle is not on it: the error names an entry of the cycle.
    const below = await thrown(
      t.skiplock.enqueueMany([
        { kind: 'step', payload: {}, ref: 'x', dependsOn: ['b'] },
        { kind: 'step', payload: {}, ref: 'a', dependsOn: ['b'] },
        { kind: 'step', payload: {}, ref: 'b', dependsOn: ['a'] },
      ]),
    );
    expect((below as ValidationError).field).toBe('jobs[2].dependsOn[0]');
    const unknown = await thrown(
      t.skiplock.enqueueMany([
        { kind: 'step', payload: {}, ref: 'a' },
        { kind: 'step', payload: {}, dependsOn: ['a', 'nope'] },
      ]),
    );
    expect((unknown as ValidationError).field).toBe('jobs[1].dependsOn[1]');
    const missing = await thrown(
      t.skiplock.enqueueMany([
        { kind: 'step', payload: {}, ref: 'a' },
        { kind: 'step', payload: {}, dependsOn: ['a'] },
        { kind: 'step', payload: {}, dependsOn: ['a', '424242'] },
      ]),
    );
    expect((missing as ValidationError).field).toBe('jobs[2].dependsOn[1]');
    expect((missing as ValidationError).reason).toBe('no job 424242');
    const self = await thrown(
      t.skiplock.enqueueMany([{ kind: 'step', payload: {}, ref: 'a', dependsOn: ['a'] }]),
    );
    expect((self as ValidationError).field).toBe('jobs[0].dependsOn[0]');
    expect(await t.jobCount()).toBe(0);
    expect(await t.query(`SELECT * FROM ${t.jobs.replace(/jobs$/, 'job_dependencies')}`)).toEqual([]);
  });

  it("a graph on the caller's client is all or none, in its transaction or outside one; the caller's transaction goes on", async () => {
    const bad = [
      { kind: 'step', payload: {}, ref: 'a' },
      { kind: 'step', payload: {}, dependsOn: ['a'] },
      { kind: 'step', payload: {}, dependsOn: ['a', '424242'] },
    ];
    const good = [
      { kind: 'step', payload: {}, ref: 'a' },
      { kind: 'step', payload: {}, dependsOn: ['a'] },
    ];
    const client = await t.db.pool.connect();
    t.defer(() => client.release());
    // Outside a transaction: nothing of a graph that fails stays.
    const outside = await thrown(t.skiplock.enqueueMany(bad, { client }));
    expect((outside as ValidationError).field).toBe('jobs[2].dependsOn[1]');
    expect(await t.jobCount()).toBe(0);
    const [a, b] = await t.skiplock.enqueueMany(good, { client });
    expect(await states(a!.id, b!.id)).toEqual({ [a!.id]: 'queued', [b!.id]: 'waiting' });
    // Inside one: the graph is undone, what the caller did before stays, and it commits.
    await client.query('BEGIN');
    await client.query(`INSERT INTO ${t.jobs} (kind) VALUES ('before')`);
    const inside = await thrown(t.skiplock.enqueueMany(bad, { client }));
    expect((inside as ValidationError).field).toBe('jobs[2].dependsOn[1]');
    await client.query(`INSERT INTO ${t.jobs} (kind) VALUES ('after')`);
    await client.query('COMMIT');
    const kinds = await t.query<{ kind: string }>(`SELECT kind FROM ${t.jobs} ORDER BY id`);
    expect(kinds.map((r) => r.kind)).toEqual(['step', 'step', 'before', 'after']);
    // A client that is not a pg connection, outside a transaction: refused, nothing inserted.
    const poolLike = { query: t.db.pool.query.bind(t.db.pool) };
    const refused = await thrown(t.skiplock.enqueueMany(good, { client: poolLike }));
    expect(refused).toBeInstanceOf(ValidationError);
    expect((refused as ValidationError).field).toBe('options.client');
    expect(await t.jobCount()).toBe(4);
  });

  it('a child enqueue that PostgreSQL fails to break a deadlock with a worker ending its parents is tried again', async () => {
    // PostgreSQL fails the transaction whose deadlock check finds the cycle: the
    // enqueue's, as it waited first, unless the machine was so slow that its one
    // check ran before the holder asked. Then the holder is failed instead, and
    // the scenario is set up again.
    for (let attempt = 1; ; attempt++) {
      const [p1, p2] = await t.skiplock.enqueueMany([
        { kind: 'step', payload: {} },
        { kind: 'step', payload: {} },
      ]);
      // Another transaction holds the second parent, as a finishing worker's statement does.
      const holder = await t.db.pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1 FOR UPDATE`, [p2!.id]);
        const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        // The enqueue locks the first parent and waits for the second ...
        const child = t.skiplock.enqueue('step', {}, { dependsOn: [p2!.id, p1!.id] });
        await waitForBlockedBy(t.db.pool, rows[0]!.pid, 'the enqueue to wait for the second parent');
        // ... and the holder then wants the first: PostgreSQL fails the enqueue, which waited first.
        try {
          await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1 FOR UPDATE`, [p1!.id]);
        } catch (error) {
          if ((error as { code?: string }).code !== '40P01' || attempt === 5) throw error;
          await holder.query('ROLLBACK');
          await child;
          continue;
        }
        await holder.query('COMMIT');
        const enqueued = await child;
        expect(await states(enqueued.id)).toEqual({ [enqueued.id]: 'waiting' });
        expect(
          await t.query(
            `SELECT parent_id::text FROM ${t.jobs.replace(/jobs$/, 'job_dependencies')} WHERE child_id = $1 ORDER BY 1`,
            [enqueued.id],
          ),
        ).toEqual(
          [{ parent_id: p1!.id }, { parent_id: p2!.id }].sort((x, y) =>
            x.parent_id.localeCompare(y.parent_id),
          ),
        );
        return;
      } finally {
        // Never back into the pool inside a transaction, whatever failed.
        await holder.query('ROLLBACK').catch(() => {});
        holder.release();
      }
    }
  });

  it("a failed parent cancels its waiting children three levels down, each naming its parent; 'run' children run", async () => {
    const [root, l1, l2, l3, runner] = await t.skiplock.enqueueMany([
      { kind: 'fails', payload: {}, ref: 'root', maxAttempts: 1 },
      { kind: 'step', payload: {}, ref: 'l1', dependsOn: ['root'] },
      { kind: 'step', payload: {}, ref: 'l2', dependsOn: ['l1'] },
      { kind: 'step', payload: {}, ref: 'l3', dependsOn: ['l2'] },
      { kind: 'step', payload: {}, dependsOn: ['root'], onParentFailure: 'run' },
    ]);
    const result = await drain(t.skiplock, {
      fails: () => {
        throw new Error('boom');
      },
      step: () => {},
    });
    expect(result.jobs.map((j) => `${j.job.id} ${j.status}`)).toEqual([
      `${root!.id} dead`,
      `${runner!.id} succeeded`,
    ]);
    expect(await states(root!.id, l1!.id, l2!.id, l3!.id)).toEqual({
      [root!.id]: 'dead: Error: boom',
      [l1!.id]: `cancelled: parent job ${root!.id} ended dead`,
      [l2!.id]: `cancelled: parent job ${l1!.id} ended cancelled`,
      [l3!.id]: `cancelled: parent job ${l2!.id} ended cancelled`,
    });
  });

  it("a chain 400 deep is cancelled at once, each naming its parent; a 'run' child halfway is released", async () => {
    const depth = 400;
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, ref: 'l0', delayMs: 60_000 },
      ...Array.from({ length: depth }, (_, i) => ({
        kind: 'step',
        payload: {},
        ref: `l${i + 1}`,
        dependsOn: [`l${i}`],
      })),
      { kind: 'step', payload: {}, dependsOn: ['l200'], onParentFailure: 'run' as const },
    ]);
    expect(await t.skiplock.cancel({ ids: [jobs[0]!.id] })).toEqual({ cancelled: 1, running: 0 });
    const chain = jobs.slice(0, depth + 1).map((j) => j!.id);
    const expected = Object.fromEntries(
      chain.map((id, i) => [
        id,
        i === 0 ? 'cancelled' : `cancelled: parent job ${chain[i - 1]} ended cancelled`,
      ]),
    );
    expect(await states(...chain)).toEqual(expected);
    expect(await states(jobs[depth + 1]!.id)).toEqual({ [jobs[depth + 1]!.id]: 'queued' });
  });

  it('cancelling a waiting job cancels its children', async () => {
    const [a, b, c] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, ref: 'a', delayMs: 60_000 },
      { kind: 'step', payload: {}, ref: 'b', dependsOn: ['a'] },
      { kind: 'step', payload: {}, dependsOn: ['b'] },
    ]);
    expect(await t.skiplock.cancel({ ids: [b!.id] })).toEqual({ cancelled: 1, running: 0 });
    expect(await states(a!.id, b!.id, c!.id)).toEqual({
      [a!.id]: 'queued',
      [b!.id]: 'cancelled',
      [c!.id]: `cancelled: parent job ${b!.id} ended cancelled`,
    });
  });

  it("onParentFailure 'run': the fan-in job sees every parent's status through parents()", async () => {
    const [ok, bad, stopped, fanIn] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, ref: 'ok' },
      { kind: 'fails', payload: {}, ref: 'bad', maxAttempts: 1 },
      { kind: 'step', payload: {}, ref: 'stopped', delayMs: 60_000 },
      { kind: 'fanIn', payload: {}, dependsOn: ['ok', 'bad', 'stopped'], onParentFailure: 'run' },
    ]);
    await t.skiplock.cancel({ ids: [stopped!.id] });
    let seen: unknown;
    const worker = t.worker({
      handlers: {
        step: () => {},
        fails: () => {
          throw new Error('no');
        },
        fanIn: async (_job, context) => {
          seen = await context.parents();
        },
      },
      pollIntervalMs: 50,
    });
    await worker.start();
    await waitFor(() => seen !== undefined, 30_000, 'the fan-in job to run');
    expect(seen).toEqual([
      { id: ok!.id, kind: 'step', status: 'succeeded', result: null },
      { id: bad!.id, kind: 'fails', status: 'dead', result: null },
      { id: stopped!.id, kind: 'step', status: 'cancelled', result: null },
    ]);
    await waitFor(async () => (await t.row(fanIn!.id)) === undefined, 30_000, 'the fan-in job to finish');
  });

  it('200 parents finishing at once on 4 worker processes release their fan-in child exactly once', async () => {
    await t.query('DROP TABLE IF EXISTS effects');
    await t.query('CREATE TABLE effects (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL)');
    const items = [
      ...Array.from({ length: 200 }, (_, i) => ({ kind: 'effect', payload: {}, ref: `p${i}`, queue: 'fan' })),
      {
        kind: 'effect',
        payload: {},
        queue: 'fan',
        dependsOn: Array.from({ length: 200 }, (_, i) => `p${i}`),
      },
    ];
    const env = {
      SKIPLOCK_URL: t.db.url,
      SKIPLOCK_SCHEMA: t.schema,
      HANDLER_DELAY_MS: '0',
      WORKER_OPTIONS: JSON.stringify({
        queues: ['fan'],
        pollIntervalMs: 100,
        concurrency: 25,
        batchSize: 10,
        // The parents are kept until the child started; the maintenance loop then deletes them.
        sweepIntervalMs: 500,
      }),
    };
    const workers: ChildProcess[] = await Promise.all(
      Array.from({ length: 4 }, async () => killedAfterTest(t, await startWorkerProcess(env))),
    );
    expect(workers).toHaveLength(4);
    // A barrier: while this lock is held no handler can write its effect, so the four processes all
    // hold parents when the lock goes, and their attempts end together.
    const barrier = await t.db.pool.connect();
    let jobs: { id: string }[];
    const holders = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(DISTINCT locked_by)::int AS n FROM ${t.jobs} WHERE status = 'running'`,
        )
      )[0]!.n;
    try {
      await barrier.query('BEGIN');
      await barrier.query('LOCK TABLE effects IN EXCLUSIVE MODE');
      jobs = await t.skiplock.enqueueMany(items);
      await waitFor(async () => (await holders()) === 4, 60_000, 'each process to hold parents', holders);
      await barrier.query('COMMIT');
    } finally {
      barrier.release();
    }
    const child = jobs[200]!;
    const effects = async () =>
      (await t.query<{ n: number }>('SELECT count(*)::int AS n FROM effects'))[0]!.n;
    await waitFor(async () => (await effects()) === 201, 120_000, 'every job to run', effects);
    const runs = await t.query<{ n: number; pids: number }>(
      'SELECT count(*)::int AS n, count(DISTINCT pid)::int AS pids FROM effects WHERE job_id = $1',
      [child.id],
    );
    expect(runs).toEqual([{ n: 1, pids: 1 }]);
    // The parents ran on more than one process.
    expect(
      (await t.query<{ pids: number }>('SELECT count(DISTINCT pid)::int AS pids FROM effects'))[0]!.pids,
    ).toBeGreaterThan(1);
    await waitFor(async () => (await t.jobCount()) === 0, 30_000, 'the child to finish');
  }, 240_000);
});

/** One node of a random graph: its parents (earlier nodes), how its own attempt ends, its failure policy. */
interface Node {
  parents: number[];
  fails: boolean;
  onParentFailure: 'cancel' | 'run';
}

const graphArb: fc.Arbitrary<Node[]> = fc.integer({ min: 1, max: 8 }).chain((n) =>
  fc.tuple(
    ...Array.from({ length: n }, (_, i) =>
      fc.record({
        parents: fc.uniqueArray(fc.integer({ min: 0, max: Math.max(0, i - 1) }), {
          maxLength: i === 0 ? 0 : 3,
        }),
        fails: fc.boolean(),
        onParentFailure: fc.constantFrom('cancel' as const, 'run' as const),
      }),
    ),
  ),
);

it('model: in random graphs every job runs at most once, only after all its parents ended, and ends as the model says', async () => {
  await fc.assert(
    fc.asyncProperty(graphArb, async (nodes) => {
      // Refs are per call; the node's position is its ref. Shuffled input order: parents need not come first.
      const order = nodes.map((_, i) => i).reverse();
      const jobs = await t.skiplock.enqueueMany(
        order.map((i) => ({
          kind: 'node',
          payload: { i },
          ref: `n${i}`,
          ...(nodes[i]!.parents.length > 0
            ? { dependsOn: nodes[i]!.parents.map((p) => `n${p}`), onParentFailure: nodes[i]!.onParentFailure }
            : {}),
        })),
      );
      const idOf = (i: number) => jobs[order.indexOf(i)]!.id;
      const ran: number[] = [];
      await drain(
        t.skiplock,
        {
          node: (job: Job) => {
            const i = (job.payload as { i: number }).i;
            ran.push(i);
            if (nodes[i]!.fails) throw new PermanentError('no');
          },
        },
        { onSuccess: 'keep' },
      );
      // The model, in node order (parents come before their children).
      const expected: string[] = [];
      nodes.forEach((node, i) => {
        const badParent = node.parents.some((p) => expected[p] !== 'succeeded');
        expected[i] =
          badParent && node.onParentFailure === 'cancel' ? 'cancelled' : node.fails ? 'failed' : 'succeeded';
      });
      const rows = await t.query<{ id: string; status: string }>(
        `SELECT id, status FROM ${t.jobs} WHERE id = ANY($1::bigint[])`,
        [jobs.map((j) => j.id)],
      );
      const statusOf = new Map(rows.map((r) => [r.id, r.status]));
      expect(nodes.map((_, i) => statusOf.get(idOf(i)))).toEqual(expected);
      expect(new Set(ran).size).toBe(ran.length);
      expect(ran.slice().sort((a, b) => a - b)).toEqual(
        expected.flatMap((status, i) => (status === 'cancelled' ? [] : [i])),
      );
      ran.forEach((i, at) => {
        for (const p of nodes[i]!.parents)
          if (expected[p] !== 'cancelled') expect(ran.indexOf(p)).toBeLessThan(at);
      });
    }),
    { numRuns: 40 },
  );
});

describe('dependsOn from SQL and from the sweeper', () => {
  it('enqueue(…, depends_on) makes a waiting child; an unknown id raises 22023 naming depends_on', async () => {
    const parent = await t.skiplock.enqueue('step', {});
    const [{ id }] = (await t.query<{ id: string }>(
      `SELECT ${t.jobs.replace(/\.jobs$/, '.enqueue')}('step', depends_on => ARRAY[$1::bigint]) AS id`,
      [parent.id],
    )) as [{ id: string }];
    expect(await states(id)).toEqual({ [id]: 'waiting' });
    await expect(
      t.query(`SELECT ${t.jobs.replace(/\.jobs$/, '.enqueue')}('step', depends_on => ARRAY[424242::bigint])`),
    ).rejects.toMatchObject({ code: '22023', message: 'depends_on: no job 424242' });
    await drain(t.skiplock, { step: () => {} });
    expect(await t.jobCount()).toBe(0);
  });

  it('a parent the sweeper ends dead (lease expired, no attempts left) cancels its child in the same transaction', async () => {
    const [parent, child] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, ref: 'p', maxAttempts: 1 },
      { kind: 'step', payload: {}, dependsOn: ['p'] },
    ]);
    // The parent as claimed by a worker that vanished a minute ago.
    await t.query(
      `UPDATE ${t.jobs} SET status = 'running', attempts = 1, lease_seq = 1, locked_by = 'gone',
              locked_at = now() - interval '1 minute', visibility_timeout_ms = 1000 WHERE id = $1`,
      [parent!.id],
    );
    await t.skiplock.sweep();
    expect(await states(parent!.id, child!.id)).toEqual({
      [parent!.id]: 'dead: reclaimed: visibility timeout',
      [child!.id]: `cancelled: parent job ${parent!.id} ended dead`,
    });
  });
});

it('two parents ending at once in two transactions: the second waits for the child row and sees the first, so the child is queued once', async () => {
  const [p1, p2, child] = await t.skiplock.enqueueMany([
    { kind: 'step', payload: {}, ref: 'p1', delayMs: 60_000 },
    { kind: 'step', payload: {}, ref: 'p2', delayMs: 60_000 },
    { kind: 'step', payload: {}, dependsOn: ['p1', 'p2'] },
  ]);
  const first = await t.db.pool.connect();
  const second = await t.db.pool.connect();
  try {
    await first.query('BEGIN');
    await second.query('BEGIN');
    const end = `UPDATE ${t.jobs} SET status = 'succeeded', finished_at = now() WHERE id = $1`;
    await first.query(end, [p1!.id]);
    // Blocks on the child's row lock, taken by the first transaction's release.
    const ending = second.query(end, [p2!.id]);
    const blocked = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
        )
      )[0]!.n;
    await waitFor(async () => (await blocked()) >= 1, 30_000, 'the second end to wait for a lock', blocked);
    expect(await states(child!.id)).toEqual({ [child!.id]: 'waiting' });
    await first.query('COMMIT');
    await ending;
    await second.query('COMMIT');
  } finally {
    first.release();
    second.release();
  }
  const rows = await t.query(`SELECT status, pending_parents FROM ${t.jobs} WHERE id = $1`, [child!.id]);
  expect(rows).toEqual([{ status: 'queued', pending_parents: 0 }]);
});

it('a transactional handler reads its parents too (worker-less, through drain)', async () => {
  const [parent] = await t.skiplock.enqueueMany([
    { kind: 'step', payload: {}, ref: 'p' },
    { kind: 'txn', payload: {}, dependsOn: ['p'] },
  ]);
  let seen: unknown;
  await drain(t.skiplock, {
    step: () => {},
    txn: {
      transactional: true,
      handle: async (_job: Job, { parents }: TransactionalHandlerContext) => {
        seen = await parents();
      },
    },
  });
  expect(seen).toEqual([{ id: parent!.id, kind: 'step', status: 'succeeded', result: null }]);
});

describe('a parent deleted on success (the default policy) passes its result to its children', () => {
  it("through a worker: the child's parents() sees { charged: 42 }; the lone job's row is gone as usual, the parent's once the child started", async () => {
    const [order, lone] = await t.skiplock.enqueueMany([
      { kind: 'charge', payload: {}, ref: 'order' },
      { kind: 'charge', payload: {} },
      { kind: 'ship', payload: {}, dependsOn: ['order'] },
    ]);
    let seen: unknown;
    const worker = t.worker({
      handlers: {
        charge: () => ({ charged: 42 }),
        ship: async (_job, context) => {
          seen = await context.parents();
        },
      },
      pollIntervalMs: 50,
      sweepIntervalMs: 100,
    });
    await worker.start();
    await waitFor(() => seen !== undefined, 30_000, 'the child to run');
    expect(seen).toEqual([{ id: order!.id, kind: 'charge', status: 'succeeded', result: { charged: 42 } }]);
    expect(await t.row(lone!.id)).toBeUndefined();
    await waitFor(async () => (await t.row(order!.id)) === undefined, 30_000, 'the parent to be deleted');
  });

  it('through drain, from a plain and from a transactional parent', async () => {
    const [plain, txn] = await t.skiplock.enqueueMany([
      { kind: 'plain', payload: {}, ref: 'plain' },
      { kind: 'txnParent', payload: {}, ref: 'txn' },
      { kind: 'child', payload: {}, dependsOn: ['plain', 'txn'] },
    ]);
    let seen: unknown;
    await drain(t.skiplock, {
      plain: () => ({ charged: 42 }),
      txnParent: {
        transactional: true,
        handle: async () => ({ reserved: [1, 2] }),
      },
      child: async (_job: Job, context) => {
        seen = await context.parents();
      },
    });
    expect(seen).toEqual([
      { id: plain!.id, kind: 'plain', status: 'succeeded', result: { charged: 42 } },
      { id: txn!.id, kind: 'txnParent', status: 'succeeded', result: { reserved: [1, 2] } },
    ]);
  });

  it("an archived parent's and a kept parent's results reach their child too", async () => {
    const [archived, kept] = await t.skiplock.enqueueMany([
      { kind: 'charge', payload: { n: 1 }, ref: 'a', onSuccess: 'archive' },
      { kind: 'charge', payload: { n: 2 }, ref: 'k', onSuccess: 'keep' },
      { kind: 'child', payload: {}, dependsOn: ['a', 'k'] },
    ]);
    let seen: unknown;
    await drain(t.skiplock, {
      charge: (job: Job) => ({ charged: (job.payload as { n: number }).n }),
      child: async (_job: Job, context) => {
        seen = await context.parents();
      },
    });
    expect(seen).toEqual([
      { id: archived!.id, kind: 'charge', status: 'succeeded', result: { charged: 1 } },
      { id: kept!.id, kind: 'charge', status: 'succeeded', result: { charged: 2 } },
    ]);
  });

  it('a value that cannot be stored is left out: the parent still succeeds, its child sees null', async () => {
    const [parent] = await t.skiplock.enqueueMany([
      { kind: 'big', payload: {}, ref: 'p' },
      { kind: 'child', payload: {}, dependsOn: ['p'] },
    ]);
    let seen: unknown;
    const result = await drain(t.skiplock, {
      big: () => 10n,
      child: async (_job: Job, context) => {
        seen = await context.parents();
      },
    });
    expect(result.failed).toBe(0);
    expect(seen).toEqual([{ id: parent!.id, kind: 'big', status: 'succeeded', result: null }]);
  });
});

it('requeueing a dead parent leaves its cancelled child cancelled; the child requeued too runs at once and reads the recorded end', async () => {
  const [parent, child] = await t.skiplock.enqueueMany([
    { kind: 'flaky', payload: {}, ref: 'p', maxAttempts: 1 },
    { kind: 'child', payload: {}, dependsOn: ['p'] },
  ]);
  let fail = true;
  let seen: unknown;
  const handlers = {
    flaky: () => {
      if (fail) throw new Error('down');
      return { ok: true };
    },
    child: async (_job: Job, context: { parents(): Promise<unknown> }) => {
      seen = await context.parents();
    },
  };
  await drain(t.skiplock, handlers);
  expect(await states(parent!.id, child!.id)).toEqual({
    [parent!.id]: 'dead: Error: down',
    [child!.id]: `cancelled: parent job ${parent!.id} ended dead`,
  });
  fail = false;
  expect(await t.skiplock.requeue({ ids: [parent!.id] })).toBe(1);
  await drain(t.skiplock, handlers, { onSuccess: 'keep' });
  expect(await states(parent!.id, child!.id)).toEqual({
    [parent!.id]: 'succeeded',
    [child!.id]: `cancelled: parent job ${parent!.id} ended dead`,
  });
  expect(seen).toBeUndefined();
  expect(await t.skiplock.requeue({ ids: [child!.id], status: 'cancelled' })).toBe(1);
  await drain(t.skiplock, handlers);
  expect(seen).toEqual([{ id: parent!.id, kind: 'flaky', status: 'dead', result: null }]);
});

it('a child cancelled before its parents ended and requeued waits for them again, then runs after them', async () => {
  const [first, second, child] = await t.skiplock.enqueueMany([
    { kind: 'step', payload: {}, ref: 'first' },
    { kind: 'step', payload: {}, ref: 'second', delayMs: 60_000 },
    { kind: 'step', payload: {}, dependsOn: ['first', 'second'] },
  ]);
  expect(await t.skiplock.cancel({ ids: [child!.id] })).toEqual({ cancelled: 1, running: 0 });
  const order: string[] = [];
  const handlers = {
    step: (job: Job) => {
      order.push(job.id);
    },
  };
  await drain(t.skiplock, handlers, { onSuccess: 'keep' });
  expect(order).toEqual([first!.id]);
  // One parent has ended since the cancel, the other has not.
  expect(await t.skiplock.requeue({ ids: [child!.id], status: 'cancelled' })).toBe(1);
  const waiting = await t.query<{ status: string; pending_parents: number }>(
    `SELECT status, pending_parents FROM ${t.jobs} WHERE id = $1`,
    [child!.id],
  );
  expect(waiting).toEqual([{ status: 'waiting', pending_parents: 1 }]);
  await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [second!.id]);
  await drain(t.skiplock, handlers, { onSuccess: 'keep' });
  expect(order).toEqual([first!.id, second!.id, child!.id]);
  // Its parents all ended: requeued again, it is queued at once (the SQL function too).
  await t.query(`UPDATE ${t.jobs} SET status = 'cancelled', finished_at = now() WHERE id = $1`, [child!.id]);
  await t.query(`SELECT ${quoteIdent(t.schema)}.requeue(ids => ARRAY[$1::bigint])`, [child!.id]);
  expect(await states(child!.id)).toEqual({ [child!.id]: 'queued' });
});

it('a parent cancelled while its child is being enqueued: the cancel waits for the enqueue and cancels the child', async () => {
  const parent = await t.skiplock.enqueue('step', {});
  const client = await t.skiplock.pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const child = await t.skiplock.enqueue('step', {}, { dependsOn: [parent.id], client });
    const cancelled = t.skiplock.cancel({ ids: [parent.id] });
    // The cancel waits on the parent's row, locked by the child's enqueue until it commits.
    await waitForBlockedBy(t.db.pool, rows[0]!.pid, 'the cancel to wait for the lock');
    await client.query('COMMIT');
    expect(await cancelled).toMatchObject({ cancelled: 1 });
    expect(await states(parent.id, child.id)).toEqual({
      [parent.id]: 'cancelled',
      [child.id]: `cancelled: parent job ${parent.id} ended cancelled`,
    });
  } finally {
    client.release();
  }
});
