/**
 * Security basics (docs/security.md):
 * - the shipped grant script (sql/grants.sql) gives a producer role and a worker
 *   role exactly what they need: the producer enqueues but cannot claim, delete,
 *   update or truncate; the worker runs jobs but cannot change the schema;
 * - identifiers are always quoted and no value is ever spliced into SQL text
 *   (every statement skiplock sends is recorded and searched for the values);
 * - passwords in connection URLs never appear in errors or logs skiplock produces.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { inspect, promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseError, Skiplock, type SkiplockError } from '../src/index.js';
import { adminUrl, createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from './support/database.js';

const GRANTS = fileURLToPath(new URL('../sql/grants.sql', import.meta.url));
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

function hasPsql(): boolean {
  try {
    execFileSync('psql', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function withUser(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = encodeURIComponent(user);
  u.password = encodeURIComponent(password);
  return u.toString();
}

/** Everything a person or a log could see of an error: message, stack, causes, fields. */
function everything(error: unknown): string {
  return [
    String(error),
    (error as Error)?.stack ?? '',
    inspect(error, { depth: 10, showHidden: false }),
    JSON.stringify(error, Object.getOwnPropertyNames(error ?? {})),
  ].join('\n');
}

describe('security: least-privilege roles from sql/grants.sql', () => {
  let db: TestDatabase;
  const suffix = randomBytes(4).toString('hex');
  const producer = { name: `skiplock_producer_${suffix}`, password: `p-${randomBytes(8).toString('hex')}` };
  // A role name that needs quoting: the script must quote it, never splice it.
  const worker = { name: `skiplock "worker" ${suffix}`, password: `w-${randomBytes(8).toString('hex')}` };
  const opened: Skiplock[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    for (const role of [producer, worker]) {
      const name = `"${role.name.replaceAll('"', '""')}"`;
      await db.query(`CREATE ROLE ${name} LOGIN PASSWORD '${role.password}'`);
    }
  });
  afterAll(async () => {
    await Promise.all(opened.map((s) => s.close()));
    await db?.close();
    const admin = new pg.Client({ connectionString: adminUrl() });
    await admin.connect();
    for (const role of [producer, worker]) {
      await admin.query(`DROP ROLE IF EXISTS "${role.name.replaceAll('"', '""')}"`);
    }
    await admin.end();
  });

  function open(role: { name: string; password: string }): Skiplock {
    const s = new Skiplock({
      connectionString: withUser(db.url, role.name, role.password),
      schema: TEST_SCHEMA,
    });
    opened.push(s);
    return s;
  }

  async function sqlAs(role: { name: string; password: string }, text: string): Promise<string | undefined> {
    const client = new pg.Client({ connectionString: withUser(db.url, role.name, role.password) });
    await client.connect();
    try {
      await client.query(text);
      return undefined;
    } catch (error) {
      return (error as { code?: string }).code;
    } finally {
      await client.end();
    }
  }

  it.skipIf(!hasPsql())('the producer enqueues; the worker runs jobs; neither can do more', async () => {
    const run = promisify(execFile);
    await run('psql', [
      db.url,
      '-X',
      '-q',
      '-v',
      'ON_ERROR_STOP=1',
      '-v',
      `schema=${TEST_SCHEMA}`,
      '-v',
      `producer_role=${producer.name}`,
      '-v',
      `worker_role=${worker.name}`,
      '-f',
      GRANTS,
    ]);
    const jobs = db.jobs;
    const archive = `${db.jobs.slice(0, -'.jobs'.length)}.jobs_archive`;

    // Producer: migrate() is a harmless check on a current schema; enqueue and read work.
    const asProducer = open(producer);
    expect((await asProducer.migrate()).applied).toEqual([]);
    const one = await asProducer.enqueue('sec_ok', { n: 1 }, { queue: 'sec' });
    const many = await asProducer.enqueueMany([
      { kind: 'sec_keep', payload: { n: 2 }, queue: 'sec' },
      { kind: 'sec_fail', payload: { n: 3 }, queue: 'sec', maxAttempts: 1 },
    ]);
    expect((await asProducer.getJob(one.id))?.status).toBe('queued');
    expect((await asProducer.stats()).some((s) => s.queue === 'sec')).toBe(true);
    // …and nothing else: 42501 is insufficient_privilege.
    await expect(asProducer.requeue({ status: 'dead' })).rejects.toMatchObject({ sqlState: '42501' });
    for (const text of [
      `DELETE FROM ${jobs}`,
      `UPDATE ${jobs} SET status = 'running'`,
      `TRUNCATE ${jobs}`,
      `SELECT id FROM ${jobs} FOR UPDATE SKIP LOCKED`,
      `INSERT INTO ${archive} SELECT * FROM ${jobs} LIMIT 0`,
      `CREATE TABLE ${jobs}_x (id int)`,
      `ALTER TABLE ${jobs} DISABLE TRIGGER ALL`,
      `DROP TABLE ${jobs}`,
    ]) {
      expect(await sqlAs(producer, text), text).toBe('42501');
    }

    // Worker: claims, completes (delete, keep, archive), fails, sweeps and requeues.
    const asWorker = open(worker);
    for (const onSuccess of ['delete', 'keep', 'archive'] as const) {
      const w = asWorker.worker({
        queues: ['sec'],
        onSuccess,
        handleSignals: false,
        pollIntervalMs: 100,
        handlers: {
          sec_ok: () => {},
          sec_keep: () => {},
          sec_fail: () => {
            throw new Error('no');
          },
        },
      });
      const errors: SkiplockError[] = [];
      w.on('error', (e) => errors.push(e));
      await w.start();
      if (onSuccess === 'delete') {
        // The three jobs the producer enqueued: two deleted on success, one dead after its only attempt.
        await waitFor(
          async () =>
            (await asWorker.getJob(one.id)) === undefined &&
            (await asWorker.getJob(many[0]!.id)) === undefined &&
            (await asWorker.getJob(many[1]!.id))?.status === 'dead',
          10_000,
          'the producer’s jobs to run',
        );
      } else {
        const extra = await asProducer.enqueue('sec_ok', { policy: onSuccess }, { queue: 'sec' });
        await waitFor(
          async () =>
            onSuccess === 'keep'
              ? (await asWorker.getJob(extra.id))?.status === 'succeeded'
              : (await db.query(`SELECT 1 FROM ${archive} WHERE id = $1`, [extra.id])).length === 1,
          10_000,
          `onSuccess ${onSuccess}`,
        );
      }
      await w.stop();
      expect(errors).toEqual([]);
    }
    expect(await asWorker.requeue({ status: 'dead', queue: 'sec' })).toBe(1);
    expect((await asWorker.getJob(many[1]!.id))?.status).toBe('queued');
    expect((await asWorker.sweep()).locked).toBe(true);
    // Queue controls: pause, resume, cancel and retention (which deletes old archived rows).
    expect(await asWorker.pauseQueue('sec-paused')).toBe(true);
    expect(await asWorker.resumeQueue('sec-paused')).toBe(true);
    expect((await asProducer.queues()).some((q) => q.name === 'sec-paused')).toBe(true);
    expect(await asWorker.cancel({ queue: 'sec-nothing' })).toEqual({ cancelled: 0, running: 0 });
    expect((await asWorker.prune({ olderThanMs: 3_600_000 })).jobs).toBe(0);
    for (const text of [
      `TRUNCATE ${jobs}`,
      `CREATE TABLE ${jobs}_x (id int)`,
      `ALTER TABLE ${jobs} DISABLE TRIGGER ALL`,
      `DROP TABLE ${jobs}`,
      `UPDATE ${archive} SET status = 'dead'`,
      `DELETE FROM ${db.jobs.slice(0, -'.jobs'.length)}.queues`,
      `DELETE FROM ${db.jobs.slice(0, -'.jobs'.length)}.migrations`,
    ]) {
      expect(await sqlAs(worker, text), text).toBe('42501');
    }
  });
});

describe('security: no value in SQL text, identifiers quoted', () => {
  let db: TestDatabase;
  const texts: string[] = [];
  const original = pg.Client.prototype.query;

  beforeAll(async () => {
    db = await createTestDatabase(false);
    // Record the text of every statement any pg client of this process sends.
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const first = args[0] as string | { text?: string } | undefined;
      texts.push(typeof first === 'string' ? first : (first?.text ?? ''));
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof original;
  });
  afterAll(async () => {
    pg.Client.prototype.query = original;
    await db?.close();
  });

  it('values travel as parameters, and the schema name only as a quoted identifier', async () => {
    const marker = `zq${randomBytes(4).toString('hex')}`;
    const schema = `s"${marker}'; DROP TABLE x; --`;
    const quoted = `"${schema.replaceAll('"', '""')}"`;
    const skiplock = new Skiplock({ pool: db.pool, schema });
    await skiplock.migrate();
    const kind = `k'${marker}"; --`;
    const queue = `q$1${marker}\\`;
    const job = await skiplock.enqueue(kind, { [marker]: `${marker}'"` }, { queue, priority: 7, delayMs: 0 });
    await skiplock.enqueueMany([{ kind, payload: [marker], queue, maxAttempts: 2 }]);
    await skiplock.listJobs({ kind, queue, ids: [job.id] });
    await skiplock.requeue({ kind: [kind], queue, status: 'dead' });
    await skiplock.stats();
    const worker = skiplock.worker({
      queues: [queue],
      handleSignals: false,
      pollIntervalMs: 100,
      sweepIntervalMs: 50,
      workerId: `w-${marker}`,
      handlers: { [kind]: () => {} },
    });
    await worker.start();
    await waitFor(async () => (await skiplock.listJobs({ queue })).length === 0, 10_000, 'the jobs to run');
    await worker.stop();
    await skiplock.sweep();
    await skiplock.close();

    expect(texts.length).toBeGreaterThan(10);
    const offending = texts.filter((text) => {
      // The schema may appear only quoted (in names and in the LISTEN channel); no other value at all.
      const rest = text.replaceAll(quoted, '').replaceAll(`"skiplock:${schema.replaceAll('"', '""')}"`, '');
      return rest.includes(marker);
    });
    expect(offending).toEqual([]);
    // The statements that name the schema quote it.
    expect(texts.some((t) => t.includes(`${quoted}.jobs`))).toBe(true);
  });
});

describe('security: no password in errors or logs', () => {
  const secret = `S3cret-${randomBytes(6).toString('hex')}`;

  it('connection errors never contain the password of the URL', async () => {
    const urls = [
      `postgres://someone:${secret}@127.0.0.1:1/nowhere`,
      `postgresql://someone:${encodeURIComponent(`${secret}@:/?#`)}@127.0.0.1:1/nowhere?sslmode=disable`,
    ];
    for (const url of urls) {
      const skiplock = new Skiplock({ connectionString: url });
      const error = await skiplock.enqueue('k', {}).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(DatabaseError);
      expect(everything(error)).not.toContain(secret);
      await skiplock.close();
    }
  });

  it('a wrong password is not echoed', async () => {
    const db = await createTestDatabase(false);
    try {
      const skiplock = new Skiplock({ connectionString: withUser(db.url, 'postgres', secret) });
      const error = await skiplock.stats().then(
        () => undefined,
        (e: unknown) => e,
      );
      // Under trust authentication the password is not checked; then there is no error to inspect.
      if (error !== undefined) expect(everything(error)).not.toContain(secret);
      await skiplock.close();
    } finally {
      await db.close();
    }
  });

  it('validation errors about the connection do not echo it', () => {
    const url = `postgres://someone:${secret}@127.0.0.1:1/nowhere`;
    const errors: unknown[] = [];
    for (const config of [
      { connectionString: url, pool: new pg.Pool() },
      { connectionString: url, bogus: true },
      { connectionString: url, schema: '' },
    ]) {
      try {
        new Skiplock(config as never);
      } catch (error) {
        errors.push(error);
      }
    }
    expect(errors).toHaveLength(3);
    for (const error of errors) expect(everything(error)).not.toContain(secret);
  });

  it('a worker that cannot connect fails to start with an error free of the password', async () => {
    const skiplock = new Skiplock({ connectionString: `postgres://someone:${secret}@127.0.0.1:1/nowhere` });
    const logged: string[] = [];
    const originalError = console.error;
    console.error = (...args: unknown[]) => {
      logged.push(args.map((a) => (typeof a === 'string' ? a : inspect(a, { depth: 10 }))).join(' '));
    };
    try {
      const reported: unknown[] = [];
      const worker = skiplock.worker({ handleSignals: false, handlers: {} });
      worker.on('error', (e) => reported.push(e));
      const error = await worker.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: 'DATABASE' });
      expect(everything(error)).not.toContain(secret);
      for (const line of logged) expect(line).not.toContain(secret);
      for (const e of reported) expect(everything(e)).not.toContain(secret);
      await worker.stop();
    } finally {
      console.error = originalError;
      await skiplock.close();
    }
  });

  it('the command line masks the password of --database-url', async () => {
    const run = promisify(execFile);
    const result = await run(
      process.execPath,
      ['--import', 'tsx', CLI, 'stats', '--database-url', `postgres://someone:${secret}@127.0.0.1:1/nowhere`],
      { env: { ...process.env, DATABASE_URL: '' } },
    ).then(
      (r) => ({ ...r, code: 0 }),
      (e: { stdout: string; stderr: string; code: number }) => e,
    );
    expect(result.code).not.toBe(0);
    expect(`${result.stdout}\n${result.stderr}`).not.toContain(secret);
    expect(result.stderr).toMatch(/\S/);
  });
});
