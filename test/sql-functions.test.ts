/**
 * The SQL interface: skiplock.enqueue / requeue / sweep called from psql, a
 * DO block and Python, with the library's effects (wake-ups included), and
 * immune to a hostile search_path.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../src/index.js';
import { TEST_SCHEMA } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { listenForWakeUps, type WakeUpListener } from './support/wake-ups.js';

const run = promisify(execFile);

const { db, skiplock } = useFileDatabase();
let listener: WakeUpListener;
/** The schema, quoted, to call its functions. */
const s = `"${TEST_SCHEMA.replaceAll('"', '""')}"`;

beforeAll(async () => {
  listener = await listenForWakeUps(db.url);
});
afterAll(async () => {
  await listener?.close();
});

/** Runs SQL through the psql program; returns its unaligned output. */
async function psql(sql: string): Promise<string> {
  const { stdout } = await run('psql', [db.url, '-X', '-v', 'ON_ERROR_STOP=1', '-Atc', sql]);
  return stdout.trim();
}

describe('enqueue()', () => {
  it('from psql: a running worker picks the job up at once (woken, not polled)', async () => {
    const started: { job: Job; at: number }[] = [];
    const worker = skiplock.worker({
      handleSignals: false,
      // Far beyond the test's bound: only the wake-up can make it this fast.
      pollIntervalMs: 60_000,
      handlers: { k: (job) => void started.push({ job, at: Date.now() }) },
    });
    await worker.start();
    try {
      const succeeded = nextEvent(worker, 'job:success');
      const id = await psql(`SELECT ${s}.enqueue('k', '{"a":1}')`);
      expect(id).toMatch(/^\d+$/);
      await succeeded;
      expect(started).toHaveLength(1);
      const { job, at } = started[0]!;
      expect({
        id: job.id,
        kind: job.kind,
        queue: job.queue,
        payload: job.payload,
        attempts: job.attempts,
      }).toEqual({ id, kind: 'k', queue: 'default', payload: { a: 1 }, attempts: 1 });
      const latencyMs = at - job.createdAt.getTime();
      console.log(`SQL enqueue → handler start: ${latencyMs} ms`);
      expect(latencyMs).toBeLessThan(1_000);
    } finally {
      await worker.stop();
    }
  });

  it('takes named arguments; left out or NULL, each is the jobs table default', async () => {
    await listener.settle();
    const [named] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue(kind => 'named', payload => '{"n":2}', queue => 'q-named', priority => 7,
                          run_at => now() + interval '1 hour', max_attempts => 3) AS id`,
    );
    const [defaults] = await db.query<{ id: string }>(`SELECT ${s}.enqueue('bare') AS id`);
    const [nulls] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue('nulls', NULL, NULL, NULL, NULL, NULL) AS id`,
    );
    const rows = await db.query(
      `SELECT kind, queue, payload, priority, max_attempts, status, attempts,
              round(extract(epoch FROM run_at - created_at))::int AS delay_s
       FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[named!.id, defaults!.id, nulls!.id]],
    );
    const base = { status: 'queued', attempts: 0, delay_s: 0 };
    expect(rows).toEqual([
      {
        ...base,
        kind: 'named',
        queue: 'q-named',
        payload: { n: 2 },
        priority: 7,
        max_attempts: 3,
        delay_s: 3600,
      },
      { ...base, kind: 'bare', queue: 'default', payload: {}, priority: 0, max_attempts: 20 },
      { ...base, kind: 'nulls', queue: 'default', payload: {}, priority: 0, max_attempts: 20 },
    ]);
    const wakeUps = await listener.settle();
    expect(wakeUps.map((w) => [w.type, w.queue, w.delayMs > 3_500_000])).toEqual([
      ['insert', 'q-named', true],
      ['insert', 'default', false],
      ['insert', 'default', false],
    ]);
  });

  it('takes group_key (last, NULL by default): the row carries it; older calls leave it NULL; bad keys raise 22023', async () => {
    const [keyed] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue('grouped', group_key => 'tenant-7') AS id`,
    );
    const [positional] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue('grouped', '{}', 'default', 0, now(), NULL, NULL, NULL, NULL, NULL, NULL, 'tenant-8') AS id`,
    );
    const [plain] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue('grouped', depends_on => NULL) AS id`,
    );
    const rows = await db.query(`SELECT group_key FROM ${db.jobs} WHERE id = ANY($1::bigint[]) ORDER BY id`, [
      [keyed!.id, positional!.id, plain!.id],
    ]);
    expect(rows).toEqual([{ group_key: 'tenant-7' }, { group_key: 'tenant-8' }, { group_key: null }]);
    for (const bad of ['', 'g'.repeat(201)]) {
      await expect(db.query(`SELECT ${s}.enqueue('grouped', group_key => $1)`, [bad])).rejects.toMatchObject({
        code: '22023',
        message: 'group_key: must be 1 to 200 characters',
      });
    }
    await db.query(`DELETE FROM ${db.jobs} WHERE kind = 'grouped'`);
    await listener.settle();
  });

  it('makes the same row as the library', async () => {
    const library = await skiplock.enqueue(
      'same',
      { x: [1, 'two'] },
      { queue: 'q-same', priority: 3, maxAttempts: 4 },
    );
    const [sql] = await db.query<{ id: string }>(
      `SELECT ${s}.enqueue('same', '{"x":[1,"two"]}', 'q-same', 3, max_attempts => 4) AS id`,
    );
    const columns =
      'kind, queue, payload, status, priority, attempts, max_attempts, locked_at, locked_by, last_error, lease_seq, visibility_timeout_ms, finished_at';
    const [a] = await db.query(`SELECT ${columns} FROM ${db.jobs} WHERE id = $1`, [library.id]);
    const [b] = await db.query(`SELECT ${columns} FROM ${db.jobs} WHERE id = $1`, [sql!.id]);
    expect(b).toEqual(a);
  });

  it('in a DO block of a transaction that rolls back: no job, nobody woken', async () => {
    await listener.settle();
    const before = await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE kind = 'rolled_back'`);
    await psql(
      `BEGIN; DO $$ BEGIN PERFORM ${s}.enqueue('rolled_back', '{"n":1}'); PERFORM ${s}.enqueue('rolled_back', queue => 'q-rb'); END $$; ROLLBACK;`,
    );
    expect(await db.query(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE kind = 'rolled_back'`)).toEqual(
      before,
    );
    expect(before).toEqual([{ n: 0 }]);
    expect(await listener.settle()).toEqual([]);
  });

  it('in a DO block that commits: the jobs, and one wake-up per queue (NOTIFY coalesces within a transaction)', async () => {
    await listener.settle();
    await psql(
      `DO $$ BEGIN PERFORM ${s}.enqueue('committed', '{"n":1}', 'q-do'); PERFORM ${s}.enqueue('committed', '{"n":2}', 'q-do'); END $$;`,
    );
    expect(await db.query(`SELECT payload FROM ${db.jobs} WHERE kind = 'committed' ORDER BY id`)).toEqual([
      { payload: { n: 1 } },
      { payload: { n: 2 } },
    ]);
    expect((await listener.settle()).map((w) => [w.type, w.queue])).toEqual([['insert', 'q-do']]);
  });

  it('from Python (psycopg)', async (context) => {
    const python = await findPythonWithPsycopg();
    if (python === 'no python3') {
      context.skip('python3 is not installed on this machine');
      return;
    }
    expect(python, 'python3 is here but cannot import psycopg: apt-get install -y python3-psycopg').not.toBe(
      'no psycopg',
    );
    const program = [
      'import sys, psycopg',
      'with psycopg.connect(sys.argv[1]) as conn:',
      `    print(conn.execute("SELECT ${s.replaceAll('"', '\\"')}.enqueue(%s, %s::jsonb, queue => %s)", ("from_python", '{"lang": "python"}', "q-python")).fetchone()[0])`,
    ].join('\n');
    const { stdout } = await run(python, ['-c', program, db.url]);
    const id = stdout.trim();
    expect(id).toMatch(/^\d+$/);
    expect(await db.query(`SELECT kind, queue, payload FROM ${db.jobs} WHERE id = $1`, [id])).toEqual([
      { kind: 'from_python', queue: 'q-python', payload: { lang: 'python' } },
    ]);
    await listener.next((w) => w.type === 'insert' && w.queue === 'q-python');
  });
});

describe('requeue()', () => {
  it('puts matching dead and failed jobs back to queued and wakes their queues', async () => {
    const insertFinished = (kind: string, status: string, queue: string) =>
      db.query<{ id: string }>(
        `INSERT INTO ${db.jobs} (kind, queue, status, attempts, last_error, finished_at)
         VALUES ($1, $2, $3, 5, 'boom', now()) RETURNING id`,
        [kind, queue, status],
      );
    const [dead] = await insertFinished('rq', 'dead', 'q-rq1');
    const [failed] = await insertFinished('rq', 'failed', 'q-rq2');
    const [otherKind] = await insertFinished('rq_other', 'dead', 'q-rq1');
    await listener.settle();
    expect(await psql(`SELECT ${s}.requeue(kinds => ARRAY['rq'], statuses => ARRAY['dead'])`)).toBe('1');
    expect(await psql(`SELECT ${s}.requeue(ids => ARRAY[${failed!.id}]::bigint[])`)).toBe('1');
    expect(await psql(`SELECT ${s}.requeue(queues => ARRAY['nothing-here'])`)).toBe('0');
    const rows = await db.query(
      `SELECT id, status, attempts, last_error, finished_at, run_at <= now() AS due FROM ${db.jobs}
       WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[dead!.id, failed!.id, otherKind!.id]],
    );
    const requeued = { status: 'queued', attempts: 0, last_error: null, finished_at: null, due: true };
    expect(rows).toEqual([
      { id: dead!.id, ...requeued },
      { id: failed!.id, ...requeued },
      {
        id: otherKind!.id,
        status: 'dead',
        attempts: 5,
        last_error: 'boom',
        finished_at: expect.any(Date),
        due: true,
      },
    ]);
    expect((await listener.settle()).map((w) => [w.type, w.queue, w.delayMs])).toEqual([
      ['requeue', 'q-rq1', 0],
      ['requeue', 'q-rq2', 0],
    ]);
  });
});

describe('sweep()', () => {
  it('reclaims dead leases (queued, or dead when out of attempts) and wakes their queues', async () => {
    const insertRunning = (attempts: number, maxAttempts: number, timeoutMs: number | null) =>
      db.query<{ id: string }>(
        `INSERT INTO ${db.jobs} (kind, queue, status, attempts, max_attempts, locked_at, locked_by, visibility_timeout_ms)
         VALUES ('swept', 'q-sweep', 'running', $1, $2, now() - interval '10 minutes', 'gone', $3) RETURNING id`,
        [attempts, maxAttempts, timeoutMs],
      );
    const [expired] = await insertRunning(1, 5, 1_000);
    const [outOfAttempts] = await insertRunning(5, 5, 1_000);
    const [defaultTimeout] = await insertRunning(1, 5, null);
    const [alive] = await insertRunning(1, 5, 3_600_000);
    await listener.settle();
    // 10-minute-old leases: the default 5-minute timeout reclaims the one without its own.
    expect(await psql(`SELECT ${s}.sweep()`)).toBe('3');
    expect(await psql(`SELECT ${s}.sweep(default_visibility_timeout_ms => 1000)`)).toBe('0');
    const rows = await db.query(
      `SELECT id, status, locked_at IS NULL AS unlocked, last_error FROM ${db.jobs}
       WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[expired!.id, outOfAttempts!.id, defaultTimeout!.id, alive!.id]],
    );
    const reclaimed = { unlocked: true, last_error: 'reclaimed: visibility timeout' };
    expect(rows).toEqual([
      { id: expired!.id, status: 'queued', ...reclaimed },
      { id: outOfAttempts!.id, status: 'dead', ...reclaimed },
      { id: defaultTimeout!.id, status: 'queued', ...reclaimed },
      { id: alive!.id, status: 'running', unlocked: false, last_error: null },
    ]);
    expect((await listener.settle()).map((w) => [w.type, w.queue])).toEqual([['sweep', 'q-sweep']]);
  });

  it("refuses a default visibility timeout below a worker's shortest (100 ms), changing nothing", async () => {
    const [job] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, status, attempts, locked_at, locked_by)
       VALUES ('fresh_lease', 'running', 1, now(), 'alive') RETURNING id`,
    );
    for (const ms of [0, 99, -2147483648]) {
      await expect(db.query(`SELECT ${s}.sweep($1)`, [ms])).rejects.toMatchObject({
        code: '22023',
        message: 'default_visibility_timeout_ms: must be at least 100 (milliseconds)',
      });
      await expect(skiplock.sweep(ms)).rejects.toMatchObject({
        name: 'ValidationError',
        field: 'defaultVisibilityTimeoutMs',
      });
    }
    await expect(skiplock.sweep(1.5e3 + 0.5)).rejects.toMatchObject({ field: 'defaultVisibilityTimeoutMs' });
    expect(await db.query(`SELECT status, locked_by FROM ${db.jobs} WHERE id = $1`, [job!.id])).toEqual([
      { status: 'running', locked_by: 'alive' },
    ]);
    // NULL means the default, as leaving it out does: a lease of now is not reclaimed.
    expect(await psql(`SELECT ${s}.sweep(NULL)`)).toBe('0');
    await db.query(`DELETE FROM ${db.jobs} WHERE id = $1`, [job!.id]);
  });

  it('does nothing while another sweep holds the sweeper lock', async () => {
    const [job] = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, status, attempts, locked_at, locked_by)
       VALUES ('locked_out', 'running', 1, now() - interval '1 hour', 'gone') RETURNING id`,
    );
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))', [
        `skiplock:sweep:${TEST_SCHEMA}`,
      ]);
      expect(await psql(`SELECT ${s}.sweep()`)).toBe('0');
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect(await psql(`SELECT ${s}.sweep()`)).toBe('1');
    expect(await db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [job!.id])).toEqual([
      { status: 'queued' },
    ]);
  });
});

describe('a hostile search_path', () => {
  it('cannot redirect the functions to shadowing tables or functions', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('CREATE SCHEMA evil');
      await client.query(`CREATE TABLE evil.jobs (LIKE ${db.jobs} INCLUDING DEFAULTS)`);
      await client.query(
        "CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$",
      );
      await client.query(
        'CREATE FUNCTION evil.wake_up(text, text, text, bigint) RETURNS void LANGUAGE sql AS $$ SELECT $$',
      );
      await client.query(
        'CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$ SELECT $$',
      );
      await client.query('CREATE TEMP TABLE jobs (LIKE evil.jobs INCLUDING DEFAULTS)');
      await client.query('SET LOCAL search_path = evil, pg_temp, public');
      const [{ id }] = (
        await client.query<{ id: string }>(`SELECT ${s}.enqueue('guarded', queue => 'q-guarded') AS id`)
      ).rows as [{ id: string }];
      await client.query(
        `INSERT INTO ${db.jobs} (kind, queue, status) VALUES ('guarded_dead', 'q-guarded', 'dead')`,
      );
      expect((await client.query(`SELECT ${s}.requeue(kinds => ARRAY['guarded_dead']) AS n`)).rows).toEqual([
        { n: 1 },
      ]);
      const shadowed = await client.query(
        'SELECT (SELECT count(*) FROM evil.jobs)::int AS evil, (SELECT count(*) FROM pg_temp.jobs)::int AS temp',
      );
      expect(shadowed.rows).toEqual([{ evil: 0, temp: 0 }]);
      const real = await client.query(
        `SELECT kind, run_at > now() - interval '1 hour' AS recent FROM ${db.jobs}
         WHERE id = $1 OR kind = 'guarded_dead' ORDER BY id`,
        [id],
      );
      expect(real.rows).toEqual([
        { kind: 'guarded', recent: true },
        { kind: 'guarded_dead', recent: true },
      ]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const wakeUps = await listener.settle();
    expect(wakeUps.filter((w) => w.queue === 'q-guarded').map((w) => w.type)).toEqual(['insert', 'requeue']);
  });

  it('the functions run with the caller’s rights and search_path pg_catalog, pg_temp', async () => {
    const rows = await db.query(
      `SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p
       WHERE p.pronamespace = $1::regnamespace AND p.proname IN ('enqueue', 'requeue', 'sweep') ORDER BY 1`,
      [s],
    );
    // Not even this schema is on the path: its objects are named qualified, so
    // nothing planted in it (a now(), an operator) is ever resolved.
    const path = ['search_path=pg_catalog, pg_temp'];
    expect(rows).toEqual([
      { proname: 'enqueue', prosecdef: false, proconfig: path },
      { proname: 'requeue', prosecdef: false, proconfig: path },
      { proname: 'sweep', prosecdef: false, proconfig: path },
    ]);
  });
});

/** A python3 that can import psycopg, 'no psycopg' if python3 is here without it, 'no python3' if none. */
async function findPythonWithPsycopg(): Promise<string> {
  let anyPython = false;
  for (const candidate of ['python3', '/usr/bin/python3']) {
    try {
      await run(candidate, ['-c', 'import psycopg']);
      return candidate;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') anyPython = true;
    }
  }
  return anyPython ? 'no psycopg' : 'no python3';
}
