/**
 * Migration versions need not be consecutive: every shipped version not yet
 * recorded is applied, in order, whatever higher versions a database already
 * has; and a worker refuses a schema that lacks any of them. The function
 * files run after every run that applies a version, so an upgrade from any
 * version ends where a fresh install does.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SchemaVersionError, Skiplock } from '../src/index.js';
import { assertMigrated, loadFunctions, loadMigrations, migrate } from '../src/migrations/migrator.js';
import { beforeMigration, TEST_SCHEMA, tableIn } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';

const { db } = useFileDatabase({ migrate: false });
const s = `"${TEST_SCHEMA.replaceAll('"', '""')}"`;

/** The newest version this library ships. */
const LATEST = loadMigrations().at(-1)!.version;

describe('an unmigrated schema', () => {
  // Runs first: no test of this file's database has migrated the default schema yet.
  it.each([
    ['skiplock', '`skiplock migrate`'],
    ['app_jobs', '`skiplock migrate --schema app_jobs`'],
    [`it's "odd"`, `\`skiplock migrate --schema 'it'\\''s "odd"'\``],
  ])('%s: the hint names the command that migrates it', async (schema, command) => {
    const error = await assertMigrated(db.pool, schema).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toContain(`: run migrate() (or ${command}) first`);
  });
});

describe('migration versions with gaps', () => {
  it('apply a lower version missing below a recorded higher one, then nothing more', async () => {
    const skiplock = new Skiplock({ pool: db.pool, schema: TEST_SCHEMA });
    // As a database migrated by a release whose versions were 1 and 5 only, when 2 arrives.
    await skiplock.migrate();
    await db.query(`DELETE FROM ${s}.migrations WHERE version = 2`);
    await db.query(`DROP FUNCTION ${s}.wake_up(text, text, text, bigint) CASCADE`);

    const worker = skiplock.worker({ handleSignals: false, handlers: {}, maintenanceOnly: true });
    const error = await worker.start().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toContain(`lacks migration 2 (wake_up), this library needs ${LATEST}`);

    expect(await skiplock.migrate()).toEqual({ applied: [2], version: LATEST });
    expect(await skiplock.migrate()).toEqual({ applied: [], version: LATEST });
    expect(await db.query(`SELECT version FROM ${s}.migrations ORDER BY version`)).toEqual(
      loadMigrations().map(({ version }) => ({ version })),
    );
    // wake_up is back, and the functions of 5 that call it work.
    expect(await db.query(`SELECT ${s}.requeue(all_jobs => true) AS n`)).toEqual([{ n: 0 }]);
    await skiplock.close();
  });

  it('run the function files again whenever they apply a version', async () => {
    const skiplock = new Skiplock({ pool: db.pool, schema: TEST_SCHEMA });
    await skiplock.migrate();
    await db.query(`ALTER FUNCTION ${s}.sweep(int) SET search_path = public`);
    await db.query(`DROP TRIGGER jobs_notify ON ${s}.jobs`);
    await db.query(`DELETE FROM ${s}.migrations WHERE version = 2`);
    await db.query(`DROP FUNCTION ${s}.wake_up(text, text, text, bigint)`);
    expect(await skiplock.migrate()).toEqual({ applied: [2], version: LATEST });
    expect(
      await db.query(
        `SELECT p.proconfig AS config, (SELECT count(*)::int FROM pg_trigger t
                                        WHERE t.tgrelid = $1::regclass AND t.tgname = 'jobs_notify') AS triggers
         FROM pg_proc p WHERE p.oid = $2::regprocedure`,
        [`${s}.jobs`, `${s}.sweep(int)`],
      ),
    ).toEqual([{ config: ['search_path=pg_catalog, pg_temp'], triggers: 1 }]);
    await skiplock.close();
  });
});

/** What a schema holds, as text: columns, constraints, indexes, functions and triggers, with their definitions. */
async function catalog(schema: string): Promise<string[]> {
  const rows = await db.query<{ item: string }>(
    `SELECT 'column ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
            || ' ' || a.attnotnull || ' ' || COALESCE(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') AS item
     FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
     LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1) AND a.attnum > 0 AND NOT a.attisdropped
     UNION ALL
     SELECT 'constraint ' || c.conrelid::regclass || ' ' || c.conname || ' ' || pg_catalog.pg_get_constraintdef(c.oid)
     FROM pg_catalog.pg_constraint c WHERE c.connamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1)
     UNION ALL
     SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
     FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
     WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1)
     UNION ALL
     SELECT 'function ' || pg_catalog.pg_get_functiondef(p.oid) || ' ' || COALESCE(p.proacl::text, '')
     FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1)
     UNION ALL
     SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid)
     FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1) AND NOT t.tgisinternal
     ORDER BY 1`,
    [schema],
  );
  // Each schema names itself in its definitions, quoted or as text.
  const quoted = `"${schema.replaceAll('"', '""')}"`;
  return rows.map((r) => r.item.replaceAll(quoted, '<schema>').replaceAll(schema, '<schema>'));
}

describe('upgrades', () => {
  it('from every shipped version end at the schema a fresh install makes', async () => {
    const fresh = `${TEST_SCHEMA}_fresh`;
    await migrate(db.pool, fresh);
    const expected = await catalog(fresh);
    expect(expected.filter((item) => item.startsWith('function ')).length).toBeGreaterThan(20);
    for (const { version } of loadMigrations().slice(0, -1)) {
      const schema = `${TEST_SCHEMA}_from_${version}`;
      await migrate(
        db.pool,
        schema,
        loadMigrations().filter((m) => m.version <= version),
        [],
      );
      await migrate(db.pool, schema);
      expect(await catalog(schema), `upgraded from version ${version}`).toEqual(expected);
    }
  });

  it('get changed function files only through a new version', () => {
    // A database at the newest version runs the function files again only when
    // a new version is applied: after changing what one creates, add a
    // migration (a comment is enough) and update both values here. A change
    // that creates the same functions (pg_get_functiondef alike, say a
    // rewording of the file) needs no new version: update the hash alone.
    const functions = createHash('sha256')
      .update(
        loadFunctions()
          .map((f) => `${f.name}\n${f.sql}`)
          .join('\n'),
      )
      .digest('hex')
      .slice(0, 16);
    expect({ version: LATEST, functions }).toEqual({ version: 27, functions: '788984fa7a2d0959' });
  });
});

describe('a job whose run_at an UPDATE made infinite before the run_at constraint', () => {
  it('keeps its meaning: never due stays out of reach, due since ever is due since its creation', async () => {
    await beforeMigration('run_at_finite', async (old, version) => {
      const jobs = tableIn(TEST_SCHEMA, 'jobs');
      await old.query(
        `INSERT INTO ${jobs} (kind, payload, created_at) VALUES
         ('parked', '{}', '2026-01-02 03:04:05.678+00'), ('overdue', '{}', '2026-01-02 03:04:05.678+00'),
         ('plain', '{}', '2026-01-02 03:04:05.678+00')`,
      );
      await old.query(`UPDATE ${jobs} SET run_at = 'infinity' WHERE kind = 'parked'`);
      await old.query(`UPDATE ${jobs} SET run_at = '-infinity' WHERE kind = 'overdue'`);
      await old.query(`UPDATE ${jobs} SET run_at = '2026-05-06 07:08:09+00' WHERE kind = 'plain'`);
      expect((await migrate(old.pool, TEST_SCHEMA)).applied).toContain(version);
      expect(
        await old.query(
          `SELECT kind, to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') AS run_at FROM ${jobs} ORDER BY kind`,
        ),
      ).toEqual([
        { kind: 'overdue', run_at: '2026-01-02 03:04:05.678' },
        { kind: 'parked', run_at: '9999-12-31 23:59:59.999' },
        { kind: 'plain', run_at: '2026-05-06 07:08:09.000' },
      ]);
      // Their rows can still change (a cancel, say) under the new constraint.
      await old.query(`UPDATE ${jobs} SET status = 'cancelled', finished_at = now() WHERE kind <> 'plain'`);
    });
  });
});
