/**
 * Migration versions need not be consecutive: every shipped version not yet
 * recorded is applied, in order, whatever higher versions a database already
 * has; and a worker refuses a schema that lacks any of them.
 */
import { describe, expect, it } from 'vitest';
import { SchemaVersionError, Skiplock } from '../src/index.js';
import { loadMigrations, migrate } from '../src/migrations/migrator.js';
import { beforeMigration, TEST_SCHEMA, tableIn } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';

const { db } = useFileDatabase({ migrate: false });
const s = `"${TEST_SCHEMA.replaceAll('"', '""')}"`;

/** The newest version this library ships. */
const LATEST = loadMigrations().at(-1)!.version;

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
