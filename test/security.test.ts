/**
 * Security basics (docs/security.md):
 * - the shipped grant script (sql/grants.sql) gives a producer role and a worker
 *   role exactly what they need: the producer enqueues but cannot claim, delete,
 *   update or truncate; the worker runs jobs but cannot change the schema;
 * - identifiers are always quoted and no value is ever spliced into SQL text
 *   (every statement skiplock sends is recorded and searched for the values);
 * - passwords in connection URLs never appear in errors or logs skiplock produces.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { inspect, promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseError, Skiplock, type SkiplockError } from '../src/index.js';
import { loadMigrations } from '../src/migrations/migrator.js';
import { runCli } from './cli/cli-process.js';
import { onServer, quoteIdent, tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { startTestServer, type TestServer } from './support/pg-server.js';
import { hasPsql } from './support/psql.js';

const VERSIONS = loadMigrations().map((m) => m.version);
const LATEST = VERSIONS.at(-1);

const GRANTS = fileURLToPath(new URL('../sql/grants.sql', import.meta.url));

const t = useTestDatabase();

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
  const suffix = randomBytes(4).toString('hex');
  const producer = { name: `skiplock_producer_${suffix}`, password: `p-${randomBytes(8).toString('hex')}` };
  // A role name that needs quoting: the script must quote it, never splice it.
  const worker = { name: `skiplock "worker" ${suffix}`, password: `w-${randomBytes(8).toString('hex')}` };
  const opened: Skiplock[] = [];

  beforeAll(async () => {
    for (const role of [producer, worker]) {
      await onServer(`CREATE ROLE ${quoteIdent(role.name)} LOGIN PASSWORD '${role.password}'`);
    }
  });
  afterAll(async () => {
    await Promise.all(opened.map((s) => s.close()));
    // The roles own nothing once the test's database is gone; drop what they were granted first.
    await t.query(`DROP OWNED BY ${quoteIdent(producer.name)}, ${quoteIdent(worker.name)}`).catch(() => {});
    for (const role of [producer, worker]) await onServer(`DROP ROLE IF EXISTS ${quoteIdent(role.name)}`);
  });

  function open(role: { name: string; password: string }): Skiplock {
    const s = new Skiplock({
      connectionString: withUser(t.db.url, role.name, role.password),
      schema: t.schema,
    });
    opened.push(s);
    return s;
  }

  async function sqlAs(role: { name: string; password: string }, text: string): Promise<string | undefined> {
    const client = new pg.Client({ connectionString: withUser(t.db.url, role.name, role.password) });
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

  async function rowsAs(role: { name: string; password: string }, text: string): Promise<unknown[]> {
    const client = new pg.Client({ connectionString: withUser(t.db.url, role.name, role.password) });
    await client.connect();
    try {
      return (await client.query(text)).rows;
    } finally {
      await client.end();
    }
  }

  /** Runs the shipped script for this test's schema and the two roles. */
  async function runGrants(): Promise<void> {
    await promisify(execFile)('psql', [
      t.db.url,
      '-X',
      '-q',
      '-v',
      'ON_ERROR_STOP=1',
      '-v',
      `schema=${t.schema}`,
      '-v',
      `producer_role=${producer.name}`,
      '-v',
      `worker_role=${worker.name}`,
      '-f',
      GRANTS,
    ]);
  }

  it.skipIf(!hasPsql())('the producer enqueues; the worker runs jobs; neither can do more', async () => {
    // Hardened servers revoke the default EXECUTE of every role on new functions:
    // the script's grants alone must be enough.
    await t.query(`REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ${quoteIdent(t.schema)} FROM PUBLIC`);
    await runGrants();
    const { jobs, archive } = t;

    // Producer: migrate() is a harmless check on a current schema; enqueue and read work.
    const asProducer = open(producer);
    expect((await asProducer.migrate()).applied).toEqual([]);
    const one = await asProducer.enqueue('sec_ok', { n: 1 }, { queue: 'sec' });
    const many = await asProducer.enqueueMany([
      { kind: 'sec_keep', payload: { n: 2 }, queue: 'sec' },
      { kind: 'sec_fail', payload: { n: 3 }, queue: 'sec', maxAttempts: 1 },
    ]);
    expect((await asProducer.getJob(one.id))?.status).toBe('queued');
    // A held unique key is answered with its holder (onConflict 'skip', the default), by a read alone.
    const keyed = await asProducer.enqueue('sec_ok', { n: 4 }, { queue: 'sec-held', uniqueKey: 'sec:held' });
    const again = await asProducer.enqueue('sec_ok', { n: 5 }, { queue: 'sec-held', uniqueKey: 'sec:held' });
    const [batchAgain] = await asProducer.enqueueMany([
      { kind: 'sec_ok', payload: { n: 6 }, queue: 'sec-held', uniqueKey: 'sec:held' },
    ]);
    expect([again.id, again.duplicate, batchAgain!.id, batchAgain!.duplicate]).toEqual([
      keyed.id,
      true,
      keyed.id,
      true,
    ]);
    expect((await asProducer.stats()).some((s) => s.queue === 'sec')).toBe(true);
    // From SQL too, unique key included; its second call returns the holder.
    const fn = (name: string) => `${quoteIdent(t.schema)}.${name}`;
    const sqlEnqueue = `SELECT ${fn('enqueue')}('sec_ok', queue => 'sec-sql', unique_key => 'sec:1') AS id`;
    const [first] = (await rowsAs(producer, sqlEnqueue)) as [{ id: string }];
    expect(await rowsAs(producer, sqlEnqueue)).toEqual([first]);
    // …and nothing else: 42501 is insufficient_privilege.
    await expect(asProducer.requeue({ status: 'dead' })).rejects.toMatchObject({ sqlState: '42501' });
    for (const text of [
      `DELETE FROM ${jobs}`,
      `UPDATE ${jobs} SET status = 'running'`,
      `TRUNCATE ${jobs}`,
      `SELECT id FROM ${jobs} FOR UPDATE SKIP LOCKED`,
      `INSERT INTO ${archive} (id) SELECT id FROM ${jobs} LIMIT 0`,
      `CREATE TABLE ${jobs}_x (id int)`,
      `ALTER TABLE ${jobs} DISABLE TRIGGER ALL`,
      `DROP TABLE ${jobs}`,
      `SELECT * FROM ${fn('cancel')}(queues => ARRAY['sec-sql'])`,
      `SELECT ${fn('requeue')}(queues => ARRAY['sec-sql'])`,
      `SELECT ${fn('sweep')}()`,
    ]) {
      expect(await sqlAs(producer, text), text).toBe('42501');
    }

    // Worker: claims, completes (delete, keep, archive), fails, sweeps and requeues.
    const asWorker = open(worker);
    for (const onSuccess of ['delete', 'keep', 'archive'] as const) {
      const w = t.track(
        asWorker.worker({
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
        }),
      );
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
              : (await t.query(`SELECT 1 FROM ${archive} WHERE id = $1`, [extra.id])).length === 1,
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
    expect(await rowsAs(worker, `SELECT * FROM ${fn('cancel')}(queues => ARRAY['sec-sql'])`)).toEqual([
      { cancelled: 1, running: 0 },
    ]);
    expect(await rowsAs(worker, `SELECT ${fn('requeue')}(ids => ARRAY[${first.id}]::bigint[]) AS n`)).toEqual(
      [{ n: 1 }],
    );
    expect(await rowsAs(worker, `SELECT ${fn('sweep')}() AS n`)).toEqual([{ n: 0 }]);
    expect((await asWorker.prune({ olderThanMs: 3_600_000 })).jobs).toBe(0);
    for (const text of [
      `TRUNCATE ${jobs}`,
      `CREATE TABLE ${jobs}_x (id int)`,
      `ALTER TABLE ${jobs} DISABLE TRIGGER ALL`,
      `DROP TABLE ${jobs}`,
      `UPDATE ${archive} SET status = 'dead'`,
      `DELETE FROM ${tableIn(t.schema, 'queues')}`,
      `DELETE FROM ${tableIn(t.schema, 'migrations')}`,
    ]) {
      expect(await sqlAs(worker, text), text).toBe('42501');
    }
  });

  it.skipIf(!hasPsql())(
    'a producer inserts only queued jobs without lease, attempts or result, whatever it was granted',
    async () => {
      await runGrants();
      const { jobs } = t;
      const forged = [
        `INSERT INTO ${jobs} (kind, status, attempts, lease_seq, locked_at, locked_by, visibility_timeout_ms)
         VALUES ('sec_forged', 'running', 1, 1, now(), 'forged-worker', 86400000)`,
        `INSERT INTO ${jobs} (kind, status, finished_at) VALUES ('sec_forged', 'succeeded', now())`,
        `INSERT INTO ${jobs} (kind, status) VALUES ('sec_forged', 'dead')`,
        `INSERT INTO ${jobs} (kind, status) VALUES ('sec_forged', 'cancelled')`,
        `INSERT INTO ${jobs} (kind, attempts) VALUES ('sec_forged', 19)`,
        `INSERT INTO ${jobs} (kind, locked_by, locked_at) VALUES ('sec_forged', 'forged-worker', now())`,
        `INSERT INTO ${jobs} (kind, lease_seq) VALUES ('sec_forged', 7)`,
        `INSERT INTO ${jobs} (kind, cancel_requested_at) VALUES ('sec_forged', now())`,
        `INSERT INTO ${jobs} (kind, last_error, errors) VALUES ('sec_forged', 'x', '[]')`,
      ];
      // With the script's grants: the columns are not the producer's to set.
      for (const text of forged) expect(await sqlAs(producer, text), text).toBe('42501');
      // With a table-wide INSERT (as an older script gave): the table's guard refuses the same rows.
      await t.query(`GRANT INSERT ON TABLE ${jobs} TO ${quoteIdent(producer.name)}`);
      for (const text of forged) expect(await sqlAs(producer, text), text).toBe('42501');
      expect(await t.query(`SELECT id FROM ${jobs} WHERE kind = 'sec_forged'`)).toEqual([]);
      // What an enqueue sets is fine either way, and a plain insert starts queued.
      const plain = `INSERT INTO ${jobs} (kind, payload, queue, priority, run_at, max_attempts, unique_key)
                     VALUES ('sec_plain', '{"n": 1}', 'sec', 3, now(), 4, 'sec-plain:1')
                     RETURNING status, attempts, lease_seq, locked_by, max_attempts`;
      const expected = { status: 'queued', attempts: 0, lease_seq: '0', locked_by: null, max_attempts: 4 };
      expect(await rowsAs(producer, plain)).toEqual([expected]);
      // The script takes the table-wide INSERT back.
      await runGrants();
      expect(await sqlAs(producer, forged[0]!)).toBe('42501');
      expect(await rowsAs(producer, plain.replace('sec-plain:1', 'sec-plain:2'))).toEqual([expected]);
      // The library's enqueue paths and the producer's schedules work under the column grants.
      const asProducer = open(producer);
      await asProducer.enqueue('sec_ok', {}, { uniqueKey: 'sec-lib:1' });
      await asProducer.enqueueMany([{ kind: 'sec_ok', payload: {}, runAt: new Date(Date.now() + 60_000) }]);
      await asProducer.schedule('sec-schedule', '0 3 * * *', 'sec_ok', { n: 1 });
      expect((await asProducer.schedules()).map((x) => x.name)).toEqual(['sec-schedule']);
      expect(await asProducer.unschedule('sec-schedule')).toBe(true);
      expect(
        await t.query(`SELECT kind, status, count(*)::int AS n FROM ${jobs} GROUP BY 1, 2 ORDER BY 1`),
      ).toEqual([
        { kind: 'sec_ok', status: 'queued', n: 2 },
        { kind: 'sec_plain', status: 'queued', n: 2 },
      ]);
      // The owner (and the worker role, which may update jobs) may still insert any state.
      await t.query(`INSERT INTO ${jobs} (kind, status, attempts) VALUES ('sec_owner', 'dead', 3)`);
      expect(
        await sqlAs(worker, `INSERT INTO ${jobs} (kind, status, attempts) VALUES ('sec_worker', 'dead', 3)`),
      ).toBeUndefined();
    },
  );
});

describe('security: no value in SQL text, identifiers quoted', () => {
  const texts: string[] = [];
  const original = pg.Client.prototype.query;

  beforeAll(() => {
    // Record the text of every statement any pg client of this process sends.
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const first = args[0] as string | { text?: string } | undefined;
      texts.push(typeof first === 'string' ? first : (first?.text ?? ''));
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof original;
  });
  afterAll(() => {
    pg.Client.prototype.query = original;
  });

  it('values travel as parameters, and the schema name only as a quoted identifier', async () => {
    const marker = `zq${randomBytes(4).toString('hex')}`;
    const schema = `s"${marker}'; DROP TABLE x; --`;
    const quoted = quoteIdent(schema);
    const skiplock = new Skiplock({ pool: t.db.pool, schema });
    await skiplock.migrate();
    const kind = `k'${marker}"; --`;
    const queue = `q$1${marker}\\`;
    const job = await skiplock.enqueue(kind, { [marker]: `${marker}'"` }, { queue, priority: 7, delayMs: 0 });
    await skiplock.enqueueMany([{ kind, payload: [marker], queue, maxAttempts: 2 }]);
    await skiplock.listJobs({ kind, queue, ids: [job.id] });
    await skiplock.requeue({ kind: [kind], queue, status: 'dead' });
    await skiplock.stats();
    const worker = t.track(
      skiplock.worker({
        queues: [queue],
        handleSignals: false,
        pollIntervalMs: 100,
        sweepIntervalMs: 50,
        workerId: `w-${marker}`,
        handlers: { [kind]: () => {} },
      }),
    );
    await worker.start();
    await waitFor(async () => (await skiplock.listJobs({ queue })).length === 0, 10_000, 'the jobs to run');
    await worker.stop();
    await skiplock.sweep();
    await skiplock.close();

    expect(texts.length).toBeGreaterThan(10);
    const offending = texts.filter((text) => {
      // The schema may appear only quoted (in names and in the LISTEN channel); no other value at all.
      const rest = text.replaceAll(quoted, '').replaceAll(quoteIdent(`skiplock:${schema}`), '');
      return rest.includes(marker);
    });
    expect(offending).toEqual([]);
    // The statements that name the schema quote it.
    expect(texts.some((t) => t.includes(`${quoted}.jobs`))).toBe(true);
  });
});

describe('security: no password in errors or logs', () => {
  const secret = `S3cret-${randomBytes(6).toString('hex')}`;
  const password = `right-${randomBytes(6).toString('hex')}`;
  // A server of its own that checks passwords: the suite's server trusts local connections.
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ password });
  });
  afterAll(async () => {
    await server?.destroy();
  });

  it('a server that checks passwords refuses a wrong one with 28P01, and nothing echoes it', async () => {
    const right = new Skiplock({ connectionString: server.url, schema: t.schema });
    try {
      // The right password connects: the wrong one below fails for being wrong, not for the server.
      expect((await right.migrate()).version).toBe(LATEST);
    } finally {
      await right.close();
    }
    const wrong = new Skiplock({
      connectionString: withUser(server.url, 'postgres', secret),
      schema: t.schema,
    });
    try {
      const error = await wrong.stats().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(DatabaseError);
      // 28P01: invalid_password.
      expect(error).toMatchObject({ sqlState: '28P01' });
      expect(everything(error)).not.toContain(secret);
      expect(everything(error)).not.toContain(password);
    } finally {
      await wrong.close();
    }
    expect(server.log()).toMatch(/password authentication failed for user "postgres"/);
    expect(server.log()).not.toContain(secret);
  });

  it('the command line masks the password it connects with, and the wrong password it was given', async () => {
    const migrated = await runCli(['migrate', '--database-url', server.url, '--schema', t.schema]);
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(migrated.stdout).toBe(
      `schema "${t.schema}" migrated to version ${LATEST} (applied ${VERSIONS.join(', ')})\n`,
    );
    expect(migrated.stderr).toContain(
      `skiplock: database postgres://postgres:****@127.0.0.1:${server.port}/postgres`,
    );
    expect(`${migrated.stdout}${migrated.stderr}`).not.toContain(password);

    const refused = await runCli([
      'stats',
      '--database-url',
      withUser(server.url, 'postgres', secret),
      '--schema',
      t.schema,
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `skiplock: database postgres://postgres:****@127.0.0.1:${server.port}/postgres`,
    );
    expect(refused.stderr).toMatch(/password authentication failed for user "postgres"/);
    expect(`${refused.stdout}${refused.stderr}`).not.toContain(secret);
  });

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
      const worker = skiplock.worker({ handleSignals: false, handlers: {}, maintenanceOnly: true });
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
});
