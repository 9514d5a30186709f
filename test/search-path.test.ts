/**
 * Search path: a role with CREATE on the skiplock schema plants functions and
 * operators there that shadow built-ins the schema's triggers, functions and
 * migrations call. A superuser's enqueue (library, plain INSERT, SQL
 * functions) and migrate must never run them. And the schemas every role
 * shares (`public`, `information_schema`) are refused unless opted into.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Skiplock, ValidationError } from '../src/index.js';
import { migrate } from '../src/migrations/migrator.js';
import { runCli } from './cli/cli-process.js';
import { onServer, quoteIdent, TEST_SCHEMA, tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const planter = {
  name: `skiplock_planter_${randomBytes(4).toString('hex')}`,
  password: randomBytes(8).toString('hex'),
};

beforeAll(async () => {
  await onServer(`CREATE ROLE ${quoteIdent(planter.name)} LOGIN PASSWORD '${planter.password}'`);
});
afterAll(async () => {
  await t.db.query(`DROP OWNED BY ${quoteIdent(planter.name)}`).catch(() => {});
  await onServer(`DROP ROLE IF EXISTS ${quoteIdent(planter.name)}`);
});

function planterUrl(): string {
  const url = new URL(t.db.url);
  url.username = planter.name;
  url.password = planter.password;
  return url.toString();
}

/**
 * As the planter (CREATE on `schema`, nothing else): a log table, and
 * look-alikes of what the schema's code calls — now(), ceil(), and operators
 * whose argument types pg_catalog has no exact match for (numeric * integer,
 * integer * interval), which would win even behind pg_catalog. Each logs its
 * call and tries to make the planter a superuser, then answers as the
 * built-in would.
 */
async function plant(schema: string): Promise<void> {
  const s = quoteIdent(schema);
  await t.db.query(`GRANT USAGE, CREATE ON SCHEMA ${s} TO ${quoteIdent(planter.name)}`);
  const client = new pg.Client({ connectionString: planterUrl() });
  await client.connect();
  try {
    await client.query(`CREATE TABLE ${s}.planted_calls (fn text, by_role text)`);
    await client.query(`GRANT INSERT ON ${s}.planted_calls TO PUBLIC`);
    const escalate = `INSERT INTO ${s}.planted_calls VALUES ($fn$%s$fn$, current_user::text);
      BEGIN EXECUTE 'ALTER ROLE ${quoteIdent(planter.name).replaceAll("'", "''")} SUPERUSER';
      EXCEPTION WHEN OTHERS THEN NULL; END;`;
    const fn = (signature: string, returns: string, name: string, result: string) =>
      client.query(
        `CREATE FUNCTION ${s}.${signature} RETURNS ${returns} LANGUAGE plpgsql SET search_path = pg_catalog AS $body$
         BEGIN ${escalate.replace('%s', name)} RETURN ${result}; END $body$`,
      );
    await fn('now()', 'timestamptz', 'now', 'pg_catalog.now()');
    await fn('ceil(numeric)', 'numeric', 'ceil(numeric)', 'pg_catalog.ceil($1)');
    await fn('ceil(double precision)', 'double precision', 'ceil(float8)', 'pg_catalog.ceil($1)');
    await fn('octet_length(text)', 'int', 'octet_length', 'pg_catalog.octet_length($1)');
    await fn(
      'times(numeric, integer)',
      'numeric',
      'numeric * integer',
      '$1 OPERATOR(pg_catalog.*) $2::numeric',
    );
    await fn(
      'times(integer, interval)',
      'interval',
      'integer * interval',
      '$1::float8 OPERATOR(pg_catalog.*) $2',
    );
    await client.query(
      `CREATE OPERATOR ${s}.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = ${s}.times)`,
    );
    await client.query(
      `CREATE OPERATOR ${s}.* (LEFTARG = integer, RIGHTARG = interval, FUNCTION = ${s}.times)`,
    );
  } finally {
    await client.end();
  }
}

async function plantedCalls(schema: string): Promise<{ fn: string; by_role: string }[]> {
  return t.db.query(`SELECT fn, by_role FROM ${tableIn(schema, 'planted_calls')}`);
}

async function planterIsSuperuser(): Promise<boolean> {
  const [row] = await t.db.query<{ rolsuper: boolean }>('SELECT rolsuper FROM pg_roles WHERE rolname = $1', [
    planter.name,
  ]);
  return row!.rolsuper;
}

/** Every way a superuser enqueues (and the SQL functions that touch jobs), on `schema`. */
async function enqueueEveryWay(skiplock: Skiplock, schema: string): Promise<void> {
  const jobs = tableIn(schema, 'jobs');
  const fn = (name: string) => `${quoteIdent(schema)}.${name}`;
  await skiplock.enqueue('planted_k', { n: 1 });
  await skiplock.enqueue('planted_k', { n: 2 }, { delayMs: 60_000 });
  await skiplock.enqueue('planted_k', { n: 3 }, { uniqueKey: 'planted:1' });
  await skiplock.enqueueMany([
    { kind: 'planted_k', payload: { n: 4 } },
    { kind: 'planted_k', payload: { n: 5 }, runAt: new Date(Date.now() + 3_600_000) },
  ]);
  await t.db.query(`INSERT INTO ${jobs} (kind, payload) VALUES ('planted_k', '{"n": 6}')`);
  await t.db.query(
    `INSERT INTO ${jobs} (kind, run_at) VALUES ('planted_k', pg_catalog.now() + interval '1 hour')`,
  );
  await t.db.query(`INSERT INTO ${jobs} (kind, status, attempts) VALUES ('planted_k', 'dead', 1)`);
  // A superuser's session that names the schema on its path, as a DBA's may.
  const client = await t.db.pool.connect();
  try {
    await client.query(`SET search_path TO ${quoteIdent(schema)}`);
    await client.query(`INSERT INTO ${jobs} (kind) VALUES ('planted_k')`);
    await client.query(
      `SELECT ${fn('enqueue')}('planted_k', run_at => pg_catalog.now() + interval '5 minutes')`,
    );
    await client.query(`SELECT ${fn('enqueue')}('planted_k', unique_key => 'planted:2')`);
    await client.query(`SELECT ${fn('requeue')}(all_jobs => true)`);
    await client.query(`SELECT * FROM ${fn('cancel')}(kinds => ARRAY['planted_none'])`);
    await client.query(`SELECT ${fn('sweep')}()`);
  } finally {
    client.release();
  }
  expect(
    (await t.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${jobs} WHERE kind = 'planted_k'`))[0]!
      .n,
  ).toBe(11);
}

describe('a function planted in the skiplock schema', () => {
  it('is never run by a superuser’s enqueue, plain INSERT or SQL function call', async () => {
    await plant(t.schema);
    await enqueueEveryWay(t.skiplock, t.schema);
    // The worker's claim and result statements too.
    const worker = t.worker({ pollIntervalMs: 50, handlers: { planted_k: () => {} } });
    await worker.start();
    const due = () =>
      t.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${t.jobs} WHERE status = 'queued' AND run_at <= now()`,
      );
    await waitFor(async () => (await due())[0]!.n === 0, 20_000, 'the due jobs to be run');
    await worker.stop();
    expect(await plantedCalls(t.schema)).toEqual([]);
    expect(await planterIsSuperuser()).toBe(false);
  });

  it('is never run by migrate, nor by what it creates, when planted before the schema was migrated', async () => {
    const schema = `${TEST_SCHEMA}_planted_first`;
    await t.db.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
    await plant(schema);
    await migrate(t.db.pool, schema);
    const skiplock = new Skiplock({ pool: t.db.pool, schema });
    try {
      await enqueueEveryWay(skiplock, schema);
    } finally {
      await skiplock.close();
    }
    expect(await plantedCalls(schema)).toEqual([]);
    expect(await planterIsSuperuser()).toBe(false);
  });

  it('cannot be reached: every function of the schema runs with search_path pg_catalog, pg_temp', async () => {
    const rows = await t.query<{ name: string; config: string[] | null }>(
      `SELECT p.proname AS name, p.proconfig AS config FROM pg_proc p
       WHERE p.pronamespace = $1::regnamespace ORDER BY 1`,
      [quoteIdent(t.schema)],
    );
    expect(rows.map((r) => r.name)).toEqual([
      'archive_partition',
      'archive_partitions',
      'cancel',
      'control',
      'enqueue',
      'group_recent_starts',
      'group_running_jobs',
      'jobs_done_notify',
      'jobs_forget_parents',
      'jobs_insert_guard',
      'jobs_max_attempts_default',
      'jobs_notify',
      'jobs_parent_ended',
      'jobs_prepare_child',
      'jobs_release_children',
      'jobs_requeue_waits',
      'jobs_unique_release',
      'jobs_unique_take',
      'queue_running_jobs',
      'requeue',
      'schedules_unpark',
      'strict_order_held',
      'sweep',
      'wake_up',
    ]);
    for (const row of rows) {
      // The archive's partition upkeep also bounds its wait for the archive's lock.
      const extra = row.name === 'archive_partitions' ? ['lock_timeout=1s'] : [];
      expect(row.config, row.name).toEqual(['search_path=pg_catalog, pg_temp', ...extra]);
    }
  });
});

describe('schemas shared with every role', () => {
  it('public and information_schema are refused as schema unless allowSharedSchema', async () => {
    for (const schema of ['public', 'information_schema']) {
      let error: unknown;
      try {
        new Skiplock({ pool: t.db.pool, schema });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ValidationError);
      expect(error).toMatchObject({ field: 'schema' });
      expect((error as Error).message).toContain('allowSharedSchema');
      // The opt-in is explicit, and only a boolean.
      expect(() => new Skiplock({ pool: t.db.pool, schema, allowSharedSchema: 'yes' as never })).toThrow(
        expect.objectContaining({ field: 'allowSharedSchema' }),
      );
      const allowed = new Skiplock({ pool: t.db.pool, schema, allowSharedSchema: true });
      expect(allowed.schema).toBe(schema);
      await allowed.close();
    }
    // Quoted names are exact: "Public" is a schema of its own.
    const own = new Skiplock({ pool: t.db.pool, schema: 'Public' });
    await own.close();
    // pg_ names stay refused, opted in or not (PostgreSQL refuses to create them).
    expect(() => new Skiplock({ pool: t.db.pool, schema: 'pg_x', allowSharedSchema: true })).toThrow(
      expect.objectContaining({ field: 'schema' }),
    );
  });

  it('the command line refuses --schema public with the reason, and migrates it with --allow-shared-schema', async () => {
    const refused = await runCli(['migrate', '--database-url', t.db.url, '--schema', 'public']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/schema: "public" is shared with every role/);
    expect((await t.db.query("SELECT to_regclass('public.jobs') IS NULL AS absent"))[0]).toEqual({
      absent: true,
    });

    const allowed = await runCli([
      'migrate',
      '--database-url',
      t.db.url,
      '--schema',
      'public',
      '--allow-shared-schema',
    ]);
    expect(allowed.code, allowed.stderr).toBe(0);
    expect((await t.db.query("SELECT to_regclass('public.jobs') IS NOT NULL AS present"))[0]).toEqual({
      present: true,
    });
  });
});
