/**
 * The SQL interface, part two: enqueue with a unique key (the library's
 * default conflict behaviour: the holder's id comes back), cancel (queued and
 * running jobs, a real worker aborting), requeue of cancelled jobs, all immune
 * to a hostile search_path and leaving nothing when rolled back.
 */
import { describe, expect, it } from 'vitest';
import { CancelledError } from '../src/index.js';
import { withClient } from './support/client.js';
import { quoteIdent, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { untilAborted } from './support/gate.js';
import { listenForWakeUps } from './support/wake-ups.js';

const t = useTestDatabase();

/** This test's schema, quoted, to call its functions. */
const fn = (name: string) => `${quoteIdent(t.schema)}.${name}`;

async function enqueueSql(args: string, values: unknown[] = []): Promise<string> {
  const [row] = await t.query<{ id: string }>(`SELECT ${fn('enqueue')}(${args}) AS id`, values);
  return row!.id;
}

async function cancelSql(args: string, values: unknown[] = []) {
  return t.query<{ cancelled: number; running: number }>(`SELECT * FROM ${fn('cancel')}(${args})`, values);
}

/** The SQLSTATE and message a statement fails with. */
async function failure(text: string, values: unknown[] = []) {
  return t.query(text, values).then(
    () => ({ code: 'none', message: '' }),
    (e: { code: string; message: string }) => ({ code: e.code, message: e.message }),
  );
}

describe('enqueue(unique_key)', () => {
  it('a held key returns the holder, one row; once the holder finished, a new job is inserted', async () => {
    const first = await enqueueSql(`'uk', '{"n":1}', unique_key => 'reindex:7'`);
    const again = await enqueueSql(`'uk', '{"n":2}', 'other-queue', unique_key => 'reindex:7'`);
    expect(again).toBe(first);
    // The library sees the same holder.
    const library = await t.skiplock.enqueue('uk', { n: 3 }, { uniqueKey: 'reindex:7' });
    expect({ id: library.id, duplicate: library.duplicate }).toEqual({ id: first, duplicate: true });
    expect(
      await t.query(`SELECT id, payload, queue, unique_key, unique_states, unique_lock FROM ${t.jobs}`),
    ).toEqual([
      {
        id: first,
        payload: { n: 1 },
        queue: 'default',
        unique_key: 'reindex:7',
        unique_states: ['queued', 'running'],
        unique_lock: 'reindex:7',
      },
    ]);

    const worker = t.worker({ onSuccess: 'keep', pollIntervalMs: 100, handlers: { uk: () => {} } });
    await worker.start();
    await waitFor(async () => (await t.row(first))?.status === 'succeeded', 10_000, 'the holder to succeed');
    await worker.stop();
    const second = await enqueueSql(`'uk', '{"n":4}', unique_key => 'reindex:7'`);
    expect(second).not.toBe(first);
    expect(await t.query(`SELECT id, status, unique_lock FROM ${t.jobs} ORDER BY id`)).toEqual([
      { id: first, status: 'succeeded', unique_lock: null },
      { id: second, status: 'queued', unique_lock: 'reindex:7' },
    ]);
  });

  it('unique_states: a kept succeeded job holds its key; NULL arguments are defaults', async () => {
    const held = `ARRAY['queued', 'running', 'succeeded', 'queued']`;
    const first = await enqueueSql(`'us', unique_key => 'k1', unique_states => ${held}`);
    await t.query(`UPDATE ${t.jobs} SET status = 'succeeded', finished_at = now() WHERE id = $1`, [first]);
    expect(await enqueueSql(`'us', unique_key => 'k1'`)).toBe(first);
    // All NULL: no key, the table's defaults.
    const plain = await enqueueSql(`'us', NULL, NULL, NULL, NULL, NULL, NULL, NULL`);
    expect(await t.query(`SELECT id, queue, unique_key, unique_states FROM ${t.jobs} ORDER BY id`)).toEqual([
      { id: first, queue: 'default', unique_key: 'k1', unique_states: ['queued', 'running', 'succeeded'] },
      { id: plain, queue: 'default', unique_key: null, unique_states: null },
    ]);
  });

  it('bad unique arguments raise 22023 naming the argument and insert nothing', async () => {
    const cases: [string, RegExp][] = [
      [`'bad', unique_key => ''`, /^unique_key: must not be empty/],
      [`'bad', unique_key => repeat('x', 2049)`, /^unique_key: must be at most 2048 bytes/],
      [`'bad', unique_states => ARRAY['queued']`, /^unique_states: needs a unique_key/],
      [`'bad', unique_key => 'k', unique_states => ARRAY['running']`, /^unique_states: must include queued/],
      [`'bad', unique_key => 'k', unique_states => ARRAY['queued', 'gone']`, /^unique_states: must be/],
      [`'bad', unique_key => 'k', unique_states => '{}'`, /^unique_states: must be a non-empty/],
    ];
    for (const [args, message] of cases) {
      const { code, message: got } = await failure(`SELECT ${fn('enqueue')}(${args})`);
      expect({ args, code }).toEqual({ args, code: '22023' });
      expect(got).toMatch(message);
    }
    expect(await t.jobCount()).toBe(0);
  });

  it('waits out an uncommitted holder: its id when it commits, a job of its own when it rolls back', async () => {
    for (const outcome of ['COMMIT', 'ROLLBACK'] as const) {
      const key = `race-${outcome}`;
      const holder = await t.db.pool.connect();
      try {
        await holder.query('BEGIN');
        const { rows } = await holder.query<{ id: string }>(
          `SELECT ${fn('enqueue')}('race', unique_key => $1) AS id`,
          [key],
        );
        const waiting = enqueueSql(`'race', unique_key => $1`, [key]);
        // The second call blocks on the holder's unique index entry until it ends.
        await waitFor(
          async () =>
            (
              await t.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%enqueue%'`,
              )
            )[0]!.n > 0,
          10_000,
          'the second enqueue to wait',
        );
        await holder.query(outcome);
        const id = await waiting;
        const ids = (
          await t.query<{ id: string }>(`SELECT id FROM ${t.jobs} WHERE unique_key = $1`, [key])
        ).map((r) => r.id);
        if (outcome === 'COMMIT') expect({ id, ids }).toEqual({ id: rows[0]!.id, ids: [rows[0]!.id] });
        else expect({ ids }).toEqual({ ids: [id] });
      } finally {
        holder.release();
      }
    }
  });
});

describe('cancel()', () => {
  it('queued jobs end cancelled at once; counts as the library’s; finished ones are left alone', async () => {
    const a = await enqueueSql(`'ca', queue => 'q1'`);
    const b = await enqueueSql(`'cb', queue => 'q1'`);
    const c = await enqueueSql(`'ca', queue => 'q2'`);
    const [dead] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, queue, status, finished_at) VALUES ('ca', 'q1', 'dead', now()) RETURNING id`,
    );
    expect(await cancelSql(`kinds => ARRAY['ca'], queues => ARRAY['q1']`)).toEqual([
      { cancelled: 1, running: 0 },
    ]);
    expect(await cancelSql(`ids => $1::bigint[]`, [[a, b, dead!.id]])).toEqual([
      { cancelled: 1, running: 0 },
    ]);
    expect(await cancelSql(`statuses => ARRAY['running']`)).toEqual([{ cancelled: 0, running: 0 }]);
    expect(
      await t.query(
        `SELECT id, status, finished_at IS NOT NULL AS finished, cancel_requested_at IS NOT NULL AS requested
         FROM ${t.jobs} ORDER BY id`,
      ),
    ).toEqual([
      { id: a, status: 'cancelled', finished: true, requested: true },
      { id: b, status: 'cancelled', finished: true, requested: true },
      { id: c, status: 'queued', finished: false, requested: false },
      { id: dead!.id, status: 'dead', finished: true, requested: false },
    ]);
    // As a plain call: one composite value.
    expect(await t.query(`SELECT ${fn('cancel')}(queues => ARRAY['q2']) AS r`)).toEqual([{ r: '(1,0)' }]);
  });

  it('refuses no filter and statuses other than waiting, queued or running, changing nothing', async () => {
    const id = await enqueueSql(`'refused'`);
    for (const [args, message] of [
      ['', /cancel never means every job/],
      [`statuses => ARRAY['dead']`, /^statuses: must be waiting, queued or running/],
      [
        `ids => ARRAY[${id}]::bigint[], statuses => ARRAY['queued', NULL]`,
        /^statuses: must be waiting, queued or running/,
      ],
    ] as const) {
      const got = await failure(`SELECT * FROM ${fn('cancel')}(${args})`);
      expect(got.code).toBe('22023');
      expect(got.message).toMatch(message);
    }
    expect((await t.row(id))?.status).toBe('queued');
  });

  it('a running job: its worker aborts the handler within 2 s; it ends cancelled, attempts unchanged', async () => {
    const aborted = untilAborted();
    const worker = t.worker({
      pollIntervalMs: 200,
      handlers: {
        wait: aborted.handler,
      },
    });
    await worker.start();
    const started = nextEvent(worker, 'job:start');
    const id = await enqueueSql(`'wait'`);
    await started;
    expect(await t.row(id)).toMatchObject({ status: 'running', attempts: 1 });
    const cancelled = nextEvent(worker, 'job:cancelled');
    const t0 = performance.now();
    expect(await cancelSql(`ids => ARRAY[${id}]::bigint[]`)).toEqual([{ cancelled: 0, running: 1 }]);
    const [ended] = await cancelled;
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(ended.id).toBe(id);
    expect(aborted.reason).toBeInstanceOf(CancelledError);
    expect(await t.row(id)).toEqual({ status: 'cancelled', attempts: 1, locked_by: null, last_error: null });
  });
});

describe('requeue()', () => {
  it('takes cancelled jobs back when named by id or status, as the library does', async () => {
    const byId = await enqueueSql(`'rq', queue => 'q-rq'`);
    const byStatus = await enqueueSql(`'rq', queue => 'q-rq'`);
    expect(await cancelSql(`queues => ARRAY['q-rq']`)).toEqual([{ cancelled: 2, running: 0 }]);
    const requeue = (args: string) => t.query<{ n: number }>(`SELECT ${fn('requeue')}(${args}) AS n`);
    // A broad filter leaves cancelled jobs be.
    expect(await requeue(`queues => ARRAY['q-rq']`)).toEqual([{ n: 0 }]);
    expect(await requeue(`ids => ARRAY[${byId}]::bigint[]`)).toEqual([{ n: 1 }]);
    expect(await requeue(`queues => ARRAY['q-rq'], statuses => ARRAY['cancelled']`)).toEqual([{ n: 1 }]);
    expect(
      await t.query(
        `SELECT id, status, attempts, finished_at, cancel_requested_at FROM ${t.jobs} ORDER BY id`,
      ),
    ).toEqual([
      { id: byId, status: 'queued', attempts: 0, finished_at: null, cancel_requested_at: null },
      { id: byStatus, status: 'queued', attempts: 0, finished_at: null, cancel_requested_at: null },
    ]);
    const bad = await failure(`SELECT ${fn('requeue')}(statuses => ARRAY['queued'])`);
    expect(bad.code).toBe('22023');
    expect(bad.message).toMatch(/^statuses: must be dead, failed or cancelled/);
  });
});

describe('transactions and search_path', () => {
  it('a DO block that enqueues and cancels, rolled back, leaves nothing and tells nobody', async () => {
    const listener = await listenForWakeUps(t.url, t.schema);
    t.defer(() => listener.close());
    const running = await enqueueSql(`'held'`);
    await t.query(`UPDATE ${t.jobs} SET status = 'running', attempts = 1, locked_at = now() WHERE id = $1`, [
      running,
    ]);
    await listener.settle();
    await withClient(t.url, async (client) => {
      await client.query('BEGIN');
      await client.query(
        `DO $$ BEGIN
           PERFORM ${fn('enqueue')}('rolled_back', unique_key => 'rb');
           PERFORM ${fn('enqueue')}('rolled_back', queue => 'q-rb');
           PERFORM * FROM ${fn('cancel')}(ids => ARRAY[${running}]::bigint[]);
         END $$`,
      );
      await client.query('ROLLBACK');
    });
    expect(await t.query(`SELECT id, status, cancel_requested_at FROM ${t.jobs}`)).toEqual([
      { id: running, status: 'running', cancel_requested_at: null },
    ]);
    expect(await listener.settle()).toEqual([]);
  });

  it('a shadowing jobs table, control and wake_up earlier on the search_path redirect nothing', async () => {
    const listener = await listenForWakeUps(t.url, t.schema);
    t.defer(() => listener.close());
    const evil = `evil_${t.schema.length}_${process.pid}`;
    t.defer(() => t.query(`DROP SCHEMA IF EXISTS ${quoteIdent(evil)} CASCADE`));
    const e = quoteIdent(evil);
    await t.query(`CREATE SCHEMA ${e}`);
    await t.query(`CREATE TABLE ${e}.jobs (LIKE ${t.jobs} INCLUDING DEFAULTS)`);
    await t.query(
      `CREATE FUNCTION ${e}.control(text, text, text, bigint[]) RETURNS void LANGUAGE sql AS $$ SELECT $$`,
    );
    await t.query(
      `CREATE FUNCTION ${e}.wake_up(text, text, text, bigint) RETURNS void LANGUAGE sql AS $$ SELECT $$`,
    );
    await t.query(
      `CREATE FUNCTION ${e}.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$`,
    );
    const running = await enqueueSql(`'hostile_running'`);
    await t.query(`UPDATE ${t.jobs} SET status = 'running', attempts = 1, locked_at = now() WHERE id = $1`, [
      running,
    ]);
    await listener.settle();
    const client = await t.db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL search_path = ${e}, pg_temp, public`);
      await client.query('CREATE TEMP TABLE jobs (LIKE pg_catalog.pg_class) ON COMMIT DROP');
      const one = await client.query(`SELECT ${fn('enqueue')}('hostile', unique_key => 'h') AS id`);
      const two = await client.query(`SELECT ${fn('enqueue')}('hostile', unique_key => 'h') AS id`);
      expect(two.rows).toEqual(one.rows);
      const cancelled = await client.query(
        `SELECT * FROM ${fn('cancel')}(kinds => ARRAY['hostile', 'hostile_running'])`,
      );
      expect(cancelled.rows).toEqual([{ cancelled: 1, running: 1 }]);
      const requeued = await client.query(
        `SELECT ${fn('requeue')}(kinds => ARRAY['hostile'], statuses => ARRAY['cancelled']) AS n`,
      );
      expect(requeued.rows).toEqual([{ n: 1 }]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await t.query(`SELECT count(*)::int AS n FROM ${e}.jobs`)).toEqual([{ n: 0 }]);
    expect(
      await t.query(
        `SELECT kind, status, cancel_requested_at IS NOT NULL AS requested,
                cancel_requested_at > now() - interval '1 hour' AS recent_request,
                run_at > now() - interval '1 hour' AS recent_run_at
         FROM ${t.jobs} ORDER BY id`,
      ),
    ).toEqual([
      {
        kind: 'hostile_running',
        status: 'running',
        requested: true,
        recent_request: true,
        recent_run_at: true,
      },
      { kind: 'hostile', status: 'queued', requested: false, recent_request: null, recent_run_at: true },
    ]);
    // The real control message and wake-ups went out on the schema's channel.
    expect((await listener.settle()).map((w) => [w.type, w.queue, w.ids])).toEqual([
      ['insert', 'default', undefined],
      ['cancel', null, [running]],
      ['requeue', 'default', undefined],
    ]);
  });

  it('the new functions run with the caller’s rights and search_path pg_catalog, pg_temp', async () => {
    const rows = await t.query(
      `SELECT p.proname, p.prosecdef, p.proconfig, pg_get_function_arguments(p.oid) LIKE '%unique_states text[]%' AS wide
       FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname IN ('enqueue', 'requeue', 'cancel')
       ORDER BY 1`,
      [quoteIdent(t.schema)],
    );
    // Not even this schema is on the path: its objects are named qualified, so
    // nothing planted in it (a now(), an operator) is ever resolved.
    const path = ['search_path=pg_catalog, pg_temp'];
    expect(rows).toEqual([
      { proname: 'cancel', prosecdef: false, proconfig: path, wide: false },
      { proname: 'enqueue', prosecdef: false, proconfig: path, wide: true },
      { proname: 'requeue', prosecdef: false, proconfig: path, wide: false },
    ]);
  });
});

describe('SQL functions and per-kind policy, attempt history', () => {
  it('enqueue without max_attempts lets the kind decide; with it, it wins', async () => {
    const left = await enqueueSql(`'pk'`);
    const given = await enqueueSql(`'pk', max_attempts => 20`);
    const keyed = await enqueueSql(`'pk', unique_key => 'pk:1'`);
    const rows = await t.query<{ id: string; max_attempts: number; max_attempts_default: boolean }>(
      `SELECT id, max_attempts, max_attempts_default FROM ${t.jobs} ORDER BY id`,
    );
    expect(rows).toEqual([
      { id: left, max_attempts: 20, max_attempts_default: true },
      { id: given, max_attempts: 20, max_attempts_default: false },
      { id: keyed, max_attempts: 20, max_attempts_default: true },
    ]);
    const worker = t.worker({
      onSuccess: 'keep',
      pollIntervalMs: 100,
      handlers: { pk: { maxAttempts: 2, handle: () => {} } },
    });
    await worker.start();
    await waitFor(async () => (await t.jobCount(`status = 'succeeded'`)) === 3, 10_000, 'the jobs to run');
    const after = await t.query<{ id: string; max_attempts: number }>(
      `SELECT id, max_attempts FROM ${t.jobs} ORDER BY id`,
    );
    expect(after).toEqual([
      { id: left, max_attempts: 2 },
      { id: given, max_attempts: 20 },
      { id: keyed, max_attempts: 2 },
    ]);
  });

  it('sweep records the reclaim in the attempt history and ends a cancel-requested job cancelled', async () => {
    const plain = await enqueueSql(`'sw'`);
    const asked = await enqueueSql(`'sw'`);
    await t.query(
      `UPDATE ${t.jobs} SET status = 'running', attempts = 1, locked_by = 'gone-worker',
              locked_at = now() - interval '1 hour',
              cancel_requested_at = CASE WHEN id = $1 THEN now() END`,
      [asked],
    );
    const [swept] = await t.query<{ n: number }>(`SELECT ${fn('sweep')}(1000) AS n`);
    expect(swept!.n).toBe(2);
    const rows = await t.query<{
      id: string;
      status: string;
      errors: { attempt: number; error: string; worker: string }[];
    }>(`SELECT id, status, errors FROM ${t.jobs} ORDER BY id`);
    expect(rows.map((r) => [r.id, r.status])).toEqual([
      [plain, 'queued'],
      [asked, 'cancelled'],
    ]);
    for (const r of rows) {
      expect(r.errors).toEqual([
        expect.objectContaining({
          attempt: 1,
          error: 'reclaimed: visibility timeout',
          worker: 'gone-worker',
        }),
      ]);
    }
    const job = await t.skiplock.getJob(plain);
    expect(job?.errors).toEqual([
      { attempt: 1, error: 'reclaimed: visibility timeout', at: expect.any(Date), workerId: 'gone-worker' },
    ]);
  });
});

describe('bad arguments of enqueue and requeue', () => {
  it.each([
    [`NULL`, 'kind: must be a non-empty name of at most 1024 bytes'],
    [`''`, 'kind: must be a non-empty name of at most 1024 bytes'],
    [`repeat('k', 1025)`, 'kind: must be a non-empty name of at most 1024 bytes'],
    [`'k', queue => ''`, 'queue: must be a non-empty name of at most 1024 bytes'],
    [`'k', max_attempts => 0`, 'max_attempts: must be at least 1'],
    [`'k', run_at => 'infinity'`, 'run_at: must be a finite time'],
    [`'k', run_at => '-infinity'`, 'run_at: must be a finite time'],
    [
      `'k', run_at => now() + interval '1 day', start_by => now() + interval '1 hour'`,
      'start_by: is not after run_at, nor after now: the job could never start',
    ],
    [
      `'k', start_by => now() - interval '1 second'`,
      'start_by: is not after run_at, nor after now: the job could never start',
    ],
    [
      `'k', run_at => now() + interval '1 hour', start_by => now() + interval '1 hour'`,
      'start_by: is not after run_at, nor after now: the job could never start',
    ],
    [
      `'k', run_at => now() - interval '1 hour', start_by => now()`,
      'start_by: is not after run_at, nor after now: the job could never start',
    ],
    [`'k', start_by => now()`, 'start_by: is not after run_at, nor after now: the job could never start'],
  ])('enqueue(%s) raises 22023: %s, and inserts nothing', async (args, message) => {
    expect(await failure(`SELECT ${fn('enqueue')}(${args})`)).toEqual({ code: '22023', message });
    expect(await t.jobCount()).toBe(0);
  });

  it('requeue without a filter is refused; all_jobs => true takes every dead and failed job', async () => {
    const dead = await enqueueSql(`'rq'`);
    const failed = await enqueueSql(`'rq'`);
    await t.query(
      `UPDATE ${t.jobs} SET status = CASE WHEN id = $1 THEN 'dead' ELSE 'failed' END, attempts = 1`,
      [dead],
    );
    expect(await failure(`SELECT ${fn('requeue')}()`)).toEqual({
      code: '22023',
      message: 'give ids, kinds, queues, statuses or tags, or all_jobs => true for every dead and failed job',
    });
    expect(await t.jobCount(`status = 'queued'`)).toBe(0);
    const [row] = await t.query<{ n: number }>(`SELECT ${fn('requeue')}(all_jobs => true) AS n`);
    expect(row!.n).toBe(2);
    expect(await t.jobCount(`status = 'queued' AND id IN ($1, $2)`, [dead, failed])).toBe(2);
  });
});
