import { describe, expect, it } from 'vitest';
import { TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { cliOn } from './cli-process.js';

const { db } = useFileDatabase();
const cli = cliOn(() => ({ url: db.url, schema: TEST_SCHEMA }));

describe('skiplock schedule, schedules, unschedule', () => {
  it('creates a schedule, lists it (table and JSON), and removes it', async () => {
    const created = await cli(
      'schedule',
      'nightly-report',
      '30 2 * * *',
      'send_report',
      '{"to": "ops"}',
      '--timezone',
      'Europe/Berlin',
      '--queue',
      'reports',
      '--overlap',
      'allow',
      '--json',
    );
    expect(created.code, created.stderr).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({
      name: 'nightly-report',
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      kind: 'send_report',
      payload: { to: 'ops' },
      queue: 'reports',
      overlap: 'allow',
      catchUp: 'latest',
    });

    const table = await cli('schedules');
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/nightly-report\s+30 2 \* \* \*\s+Europe\/Berlin\s+send_report\s+reports/);
    const listed = await cli('schedules', '--json');
    expect(JSON.parse(listed.stdout).map((s: { name: string }) => s.name)).toEqual(['nightly-report']);

    const removed = await cli('unschedule', 'nightly-report');
    expect([removed.code, removed.stdout.trim()]).toEqual([0, 'removed schedule nightly-report']);
    const again = await cli('unschedule', 'nightly-report');
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^skiplock: error: no schedule named "nightly-report"$/m);
    expect((await cli('schedules')).stdout.trim()).toBe('no schedules');
  });

  it('unschedule --json says what it removed; a missing name exits 1 with no JSON', async () => {
    expect((await cli('schedule', 'hourly-sync', '@hourly', 'sync')).code).toBe(0);
    const removed = await cli('unschedule', 'hourly-sync', '--json');
    expect(removed.code, removed.stderr).toBe(0);
    expect(JSON.parse(removed.stdout)).toEqual({ name: 'hourly-sync', removed: true });
    const again = await cli('unschedule', 'hourly-sync', '--json');
    expect([again.code, again.stdout]).toEqual([1, '']);
    expect(again.stderr).toMatch(/^skiplock: error: no schedule named "hourly-sync"$/m);
  });

  it('lists a parked schedule as parked, with the reason', async () => {
    const schedules = db.jobs.replace(/\.jobs$/, '.schedules');
    await db.query(
      `INSERT INTO ${schedules} (name, cron, kind, next_run_at, parked_reason)
       VALUES ('broken', 'every day', 'k', now(), 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2')`,
    );
    try {
      const table = await cli('schedules');
      expect(table.code, table.stderr).toBe(0);
      expect(table.stdout.split('\n')[0]).toMatch(/next run\s+last run\s+parked$/);
      expect(table.stdout).toMatch(
        /broken\s+every day\s+UTC\s+k\s+default\s+skip\s+latest\s+parked\s+-\s+invalid cron: must have 5 or 6 fields \(or be a nickname such as @hourly\), got 2$/m,
      );
      const listed = await cli('schedules', '--json');
      expect(JSON.parse(listed.stdout)).toMatchObject([
        {
          name: 'broken',
          parkedReason: 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2',
        },
      ]);
    } finally {
      await db.query(`DELETE FROM ${schedules}`);
    }
  });

  it('refuses a bad cron or time zone naming it (exit 2), storing nothing', async () => {
    const badCron = await cli('schedule', 'x', '61 * * * *', 'k');
    expect(badCron.code).toBe(2);
    expect(badCron.stderr).toMatch(/invalid CRON: Invalid value for minute: 61/);
    const badZone = await cli('schedule', 'x', '* * * * *', 'k', '--timezone', 'Nowhere/City');
    expect(badZone.code).toBe(2);
    expect(badZone.stderr).toMatch(/invalid --timezone: unknown time zone "Nowhere\/City"/);
    expect(await db.query(`SELECT name FROM ${db.jobs.replace(/\.jobs$/, '.schedules')}`)).toEqual([]);
  });
});
