import { describe, expect, it } from 'vitest';
import { assertMigrated, loadMigrations, type Migration, migrate } from '../src/migrations/migrator.js';
import { useFileDatabase } from './support/file-database.js';

const { db } = useFileDatabase({ migrate: false });

describe('migrator', () => {
  it('applies a migration numbered below one already applied, once, in order', async () => {
    const schema = 'late_migration';
    // The shipped migrations numbered ×10, so a late one fits between two of
    // them (25: after 2, before 3) while each still finds what it builds on.
    const shipped = loadMigrations().map((m) => ({ ...m, version: m.version * 10 }));
    const latest = shipped.at(-1)!.version;
    const late: Migration = { version: 25, name: 'late', sql: 'CREATE TABLE late_marker (n int)' };
    const withLate = [...shipped, late].sort((a, b) => a.version - b.version);

    const first = await migrate(db.pool, schema, shipped);
    expect(first.applied).toEqual(shipped.map((m) => m.version));
    expect(first.version).toBe(latest);

    const second = await migrate(db.pool, schema, withLate);
    expect(second).toEqual({ applied: [25], version: latest });
    const rows = await db.query<{ version: number }>(
      'SELECT version FROM late_migration.migrations ORDER BY version',
    );
    expect(rows.map((r) => r.version)).toEqual(withLate.map((m) => m.version));
    expect(await db.query('SELECT count(*)::int AS n FROM late_migration.late_marker')).toEqual([{ n: 0 }]);

    expect(await migrate(db.pool, schema, withLate)).toEqual({ applied: [], version: latest });
  });

  it('a schema that lacks a shipped migration below its newest is not migrated', async () => {
    const schema = 'gap';
    await migrate(db.pool, schema);
    await db.query('DELETE FROM gap.migrations WHERE version = 2');
    await expect(assertMigrated(db.pool, schema)).rejects.toThrow(/lacks migration 2 \(wake_up\)/);
  });
});
