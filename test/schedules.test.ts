import { beforeEach, describe, expect, it } from 'vitest';
import { withTransaction } from '../src/db/executor.js';
import { JobQueries } from '../src/db/queries/jobs.js';
import { type ScheduleOptions, ValidationError } from '../src/index.js';
import { migrate } from '../src/migrations/migrator.js';
import {
  MAX_JOBS_PER_TURN,
  runDueSchedules,
  SCHEDULE_CHECK_MS,
  schedulerService,
} from '../src/schedule/scheduler.js';
import { beforeMigration, TEST_SCHEMA, tableIn } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();
const schedules = db.jobs.replace(/\.jobs$/, '.schedules');
const queries = new JobQueries(TEST_SCHEMA);

beforeEach(async () => {
  await db.query(`DELETE FROM ${schedules}`);
  await db.query(`DELETE FROM ${db.jobs}`);
});

/** One scheduler turn, in a transaction of its own, as a worker runs it. */
function turn() {
  return withTransaction(db.pool, (client) => runDueSchedules(client, queries));
}

/** Schedules `name` daily at midnight UTC: jobs of kind `name`, an empty payload. */
function daily(name: string, options: ScheduleOptions = {}) {
  return skiplock.schedule(name, '0 0 * * *', name, {}, options);
}

async function jobsOf(kind: string) {
  return db.query<{ run_at: Date; early: boolean }>(
    `SELECT run_at, created_at < run_at AS early FROM ${db.jobs} WHERE kind = $1 ORDER BY run_at`,
    [kind],
  );
}

/** The most recent midnight (UTC) on the database clock, and `days` days before it. */
async function midnight(days = 0): Promise<Date> {
  const [row] = await db.query<{ at: Date }>(
    `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => $1) AS at`,
    [days],
  );
  return row!.at;
}

describe('schedule, schedules, unschedule', () => {
  it('stores a schedule with its first slot after the database clock, and lists it', async () => {
    const [now] = await db.query<{ now: Date }>('SELECT now()');
    const info = await skiplock.schedule(
      'hourly-report',
      '0 * * * *',
      'report',
      { to: 'ops' },
      { queue: 'reports' },
    );
    const nextHour = new Date(Math.floor(now!.now.getTime() / 3_600_000) * 3_600_000 + 3_600_000);
    expect(info).toMatchObject({
      name: 'hourly-report',
      cron: '0 * * * *',
      timezone: 'UTC',
      kind: 'report',
      payload: { to: 'ops' },
      queue: 'reports',
      priority: 0,
      maxAttempts: 20,
      overlap: 'skip',
      catchUp: 'latest',
      catchUpMs: 86_400_000,
      nextRunAt: nextHour,
      lastRunAt: null,
      lastJobId: null,
    });
    expect(await skiplock.schedules()).toEqual([info]);
  });

  it('an update keeps the awaited slot unless the rule changes', async () => {
    await skiplock.schedule('s', '0 0 * * *', 'k', {});
    await db.query(`UPDATE ${schedules} SET next_run_at = '2030-01-01T00:00:00Z'`);
    const sameRule = await skiplock.schedule('s', '0 0 * * *', 'k', { v: 2 }, { priority: 5 });
    expect([sameRule.nextRunAt.toISOString(), sameRule.payload, sameRule.priority]).toEqual([
      '2030-01-01T00:00:00.000Z',
      { v: 2 },
      5,
    ]);
    const newRule = await skiplock.schedule('s', '0 12 * * *', 'k', {});
    expect(newRule.nextRunAt.getUTCHours()).toBe(12);
    expect(newRule.nextRunAt < new Date('2030-01-01T00:00:00Z')).toBe(true);
  });

  it('unschedule removes it (true), then finds nothing (false)', async () => {
    await skiplock.schedule('gone', '* * * * *', 'k', {});
    expect(await skiplock.unschedule('gone')).toBe(true);
    expect(await skiplock.unschedule('gone')).toBe(false);
    expect(await skiplock.schedules()).toEqual([]);
  });

  it('refuses bad input naming the field, and stores nothing', async () => {
    const cases: [() => Promise<unknown>, string][] = [
      [() => skiplock.schedule('x', '61 * * * *', 'k', {}), 'cron'],
      [() => skiplock.schedule('x', 'every day', 'k', {}), 'cron'],
      [
        () => skiplock.schedule('x', '* * * * *', 'k', {}, { timezone: 'Europe/Atlantis' }),
        'options.timezone',
      ],
      [() => skiplock.schedule('x', '* * * * *', '', {}), 'kind'],
      [() => skiplock.schedule('', '* * * * *', 'k', {}), 'name'],
      [() => skiplock.schedule('x', '* * * * *', 'k', { n: 1n }), 'payload.n'],
      [() => skiplock.schedule('x', '* * * * *', 'k', {}, { overlap: 'queue' as never }), 'options.overlap'],
      [() => skiplock.schedule('x', '* * * * *', 'k', {}, { catchUp: 'some' as never }), 'options.catchUp'],
      [() => skiplock.schedule('x', '* * * * *', 'k', {}, { catchUpMs: -1 }), 'options.catchUpMs'],
      [() => skiplock.schedule('x', '* * * * *', 'k', {}, { every: 1 } as never), 'options.every'],
    ];
    for (const [call, field] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error, field).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(field);
    }
    expect(await skiplock.schedules()).toEqual([]);
  });
});

describe('the scheduler', () => {
  it('enqueues nothing before the slot (database clock)', async () => {
    await skiplock.schedule('later', '0 0 1 1 *', 'later', {});
    expect((await turn()).enqueued).toBe(0);
    expect(await jobsOf('later')).toEqual([]);
  });

  it('after 5 missed daily slots: latest → 1, all → 5, none → 0; each then waits for the next slot', async () => {
    const last = await midnight(0);
    const next = new Date(last.getTime() + 86_400_000);
    for (const catchUp of ['latest', 'all', 'none'] as const) {
      await daily(`daily-${catchUp}`, { catchUp, overlap: 'allow', catchUpMs: 10 * 86_400_000 });
    }
    await db.query(`UPDATE ${schedules} SET next_run_at = $1`, [await midnight(4)]);
    expect((await turn()).enqueued).toBe(6);
    expect(await jobsOf('daily-latest')).toEqual([{ run_at: last, early: false }]);
    expect(await jobsOf('daily-all')).toEqual(
      [4, 3, 2, 1, 0].map((d) => ({ run_at: new Date(last.getTime() - d * 86_400_000), early: false })),
    );
    expect(await jobsOf('daily-none')).toEqual([]);
    const rows = await db.query<{ next_run_at: Date }>(`SELECT next_run_at FROM ${schedules}`);
    expect(rows).toEqual([{ next_run_at: next }, { next_run_at: next }, { next_run_at: next }]);
    expect((await turn()).enqueued).toBe(0);
  });

  it("'all' goes back only catchUpMs", async () => {
    await daily('window', { catchUp: 'all', overlap: 'allow', catchUpMs: 2 * 86_400_000 + 1000 });
    await db.query(`UPDATE ${schedules} SET next_run_at = $1`, [await midnight(4)]);
    await turn();
    expect((await jobsOf('window')).map((j) => j.run_at)).toEqual([await midnight(1), await midnight(0)]);
  });

  it("overlap 'skip' enqueues no slot while the previous job is queued; 'allow' enqueues each", async () => {
    const options = { catchUp: 'all', catchUpMs: 10 * 86_400_000 } as const;
    await daily('skip', options);
    await daily('allow', { ...options, overlap: 'allow' });
    await db.query(`UPDATE ${schedules} SET next_run_at = $1`, [await midnight(3)]);
    await turn();
    const days = await Promise.all([3, 2, 1, 0].map((d) => midnight(d)));
    expect((await jobsOf('skip')).map((j) => j.run_at)).toEqual([days[0]]);
    expect((await jobsOf('allow')).map((j) => j.run_at)).toEqual(days);
    // The previous job is still queued: the next slot is skipped, and passed.
    await db.query(`UPDATE ${schedules} SET next_run_at = $1 WHERE name = 'skip'`, [days[2]]);
    expect((await turn()).enqueued).toBe(0);
    expect((await jobsOf('skip')).map((j) => j.run_at)).toEqual([days[0]]);
    // Once the previous job is gone, the next slot gets a job again.
    await db.query(`DELETE FROM ${db.jobs} WHERE kind = 'skip'`);
    await db.query(`UPDATE ${schedules} SET next_run_at = $1 WHERE name = 'skip'`, [days[3]]);
    await turn();
    expect((await jobsOf('skip')).map((j) => j.run_at)).toEqual([days[3]]);
  });

  it('eight schedulers at once enqueue each slot exactly once', async () => {
    await daily('race', { catchUp: 'all', overlap: 'allow', catchUpMs: 10 * 86_400_000 });
    await db.query(`UPDATE ${schedules} SET next_run_at = $1`, [await midnight(4)]);
    const turns = await Promise.all(Array.from({ length: 8 }, () => turn()));
    expect(turns.reduce((n, t) => n + t.enqueued, 0)).toBe(5);
    const expected = await Promise.all([4, 3, 2, 1, 0].map((d) => midnight(d)));
    expect((await jobsOf('race')).map((j) => j.run_at)).toEqual(expected);
  });
});

/** A schedule row inserted by plain SQL, as a producer role may; due a second ago unless told otherwise. */
async function insertRow(row: Record<string, unknown>) {
  const columns = { next_run_at: new Date(Date.now() - 1000), ...row };
  const names = Object.keys(columns);
  await db.query(
    `INSERT INTO ${schedules} (${names.join(', ')}) VALUES (${names.map((_, i) => `$${i + 1}`).join(', ')})`,
    Object.values(columns),
  );
}

async function parkedReasons() {
  return Object.fromEntries((await skiplock.schedules()).map((s) => [s.name, s.parkedReason]));
}

describe('rows the scheduler cannot use', () => {
  it('a row whose cron or time zone does not parse is parked once with its reason; the other schedules keep their slots', async () => {
    await insertRow({ name: 'bad-cron', cron: 'every day', kind: 'k' });
    await insertRow({ name: 'bad-zone', cron: '* * * * *', timezone: 'Europe/Atlantis', kind: 'k' });
    await insertRow({ name: 'bad-kind', cron: '* * * * *', kind: '' });
    await skiplock.schedule('good', '* * * * * *', 'good', {}, { overlap: 'allow' });
    await db.query(`UPDATE ${schedules} SET next_run_at = now() - interval '1 second' WHERE name = 'good'`);

    const first = await turn();
    expect([...first.parked].sort((a, b) => a.name.localeCompare(b.name))).toEqual([
      {
        name: 'bad-cron',
        reason: 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2',
      },
      { name: 'bad-kind', reason: 'invalid kind: must not be empty' },
      { name: 'bad-zone', reason: 'invalid timezone: unknown time zone "Europe/Atlantis"' },
    ]);
    expect(first.enqueued).toBe(1);
    // Parked rows are not due: the next turn neither reports them again nor counts them as due.
    const second = await turn();
    expect(second.parked).toEqual([]);
    expect(second.untilNextMs).toBeGreaterThan(0);
    expect(await parkedReasons()).toEqual({
      'bad-cron': 'invalid cron: must have 5 or 6 fields (or be a nickname such as @hourly), got 2',
      'bad-kind': 'invalid kind: must not be empty',
      'bad-zone': 'invalid timezone: unknown time zone "Europe/Atlantis"',
      good: null,
    });
    expect(await jobsOf('k')).toEqual([]);
  });

  it('an update un-parks a row: schedule() again, or a plain UPDATE that fixes it', async () => {
    await insertRow({ name: 'by-api', cron: 'every day', kind: 'by-api' });
    await insertRow({ name: 'by-sql', cron: 'every day', kind: 'by-sql' });
    expect((await turn()).parked.map((p) => p.name).sort()).toEqual(['by-api', 'by-sql']);

    await skiplock.schedule('by-api', '* * * * * *', 'by-api', {});
    await db.query(
      `UPDATE ${schedules} SET cron = '* * * * * *', next_run_at = now() - interval '1 second' WHERE name = 'by-sql'`,
    );
    expect(await parkedReasons()).toEqual({ 'by-api': null, 'by-sql': null });
    await db.query(`UPDATE ${schedules} SET next_run_at = now() - interval '1 second'`);
    const after = await turn();
    expect(after).toMatchObject({ enqueued: 2, parked: [] });
    expect((await jobsOf('by-api')).length).toBe(1);
    expect((await jobsOf('by-sql')).length).toBe(1);
  });

  it('a schedule whose jobs the database refuses is parked; the slots of the others in that turn stay enqueued', async () => {
    // Stands for any constraint on jobs a schedule row can break.
    const jobsTable = db.jobs;
    await db.query(
      `CREATE OR REPLACE FUNCTION public.refuse_kind() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'kind refused here' USING ERRCODE = 'check_violation'; END $$`,
    );
    await db.query(
      `CREATE TRIGGER refuse_kind BEFORE INSERT ON ${jobsTable} FOR EACH ROW WHEN (NEW.kind = 'refused')
       EXECUTE FUNCTION public.refuse_kind()`,
    );
    try {
      for (const name of ['a-first', 'b-refused', 'c-last']) {
        await skiplock.schedule(name, '* * * * * *', name === 'b-refused' ? 'refused' : name, {});
      }
      await db.query(`UPDATE ${schedules} SET next_run_at = now() - interval '1 second'`);
      const result = await turn();
      expect(result.enqueued).toBe(2);
      expect(result.parked).toEqual([
        { name: 'b-refused', reason: 'the database refused its jobs: kind refused here (SQLSTATE 23514)' },
      ]);
      expect((await jobsOf('a-first')).length).toBe(1);
      expect((await jobsOf('c-last')).length).toBe(1);
      expect(await parkedReasons()).toEqual({
        'a-first': null,
        'b-refused': 'the database refused its jobs: kind refused here (SQLSTATE 23514)',
        'c-last': null,
      });
    } finally {
      await db.query(`DROP TRIGGER refuse_kind ON ${jobsTable}`);
    }
  });

  it('the database refuses a catch-up window over 10 years and a slot that is not an instant', async () => {
    const refused = async (row: Record<string, unknown>) => {
      const error = await insertRow({ name: 'x', cron: '* * * * *', kind: 'k', ...row }).catch(
        (e: unknown) => e,
      );
      return (error as { code?: string }).code;
    };
    expect(await refused({ catch_up_ms: 315_360_000_001 })).toBe('23514');
    expect(await refused({ catch_up_ms: '9000000000000000' })).toBe('23514');
    expect(await refused({ next_run_at: 'infinity' })).toBe('23514');
    expect(await refused({ next_run_at: '-infinity' })).toBe('23514');
    expect(await refused({ last_run_at: '-infinity' })).toBe('23514');
    await insertRow({ name: 'y', cron: '* * * * *', kind: 'k', catch_up_ms: 315_360_000_000 });
    const update = await db
      .query(`UPDATE ${schedules} SET catch_up_ms = 3153600000000000 WHERE name = 'y'`)
      .catch((e: unknown) => e);
    expect((update as { code?: string }).code).toBe('23514');
    expect(await db.query(`SELECT name, catch_up_ms FROM ${schedules}`)).toEqual([
      { name: 'y', catch_up_ms: '315360000000' },
    ]);
  });

  it('a turn enqueues at most MAX_JOBS_PER_TURN catch-up jobs, every due schedule still gets its slot, and the next turn waits', async () => {
    const hourAgo = (await db.query<{ at: Date }>(`SELECT now() - interval '1 hour' AS at`))[0]!.at;
    for (const name of ['catch-up-1', 'catch-up-2', 'catch-up-3']) {
      await insertRow({
        name,
        cron: '* * * * * *',
        kind: 'catch-up',
        overlap: 'allow',
        catch_up: 'all',
        catch_up_ms: 315_360_000_000,
        next_run_at: hourAgo,
      });
    }
    await skiplock.schedule('on-time', '* * * * * *', 'on-time', {}, { overlap: 'allow' });
    await db.query(
      `UPDATE ${schedules} SET next_run_at = now() - interval '1 second' WHERE name = 'on-time'`,
    );

    const service = schedulerService(queries, () => {});
    await withTransaction(db.pool, (client) => service.run(client));
    // The first catch-up takes the turn's budget; the others and the on-time schedule get one slot each.
    expect(await db.query(`SELECT count(*)::int AS n FROM ${db.jobs}`)).toEqual([
      { n: MAX_JOBS_PER_TURN + 3 },
    ]);
    expect((await jobsOf('on-time')).length).toBe(1);
    expect(service.intervalMs).toBe(SCHEDULE_CHECK_MS);
  });
});

describe('upgrading', () => {
  it('the bounds migration brings rows stored before it inside the bounds, and applies', async () => {
    await beforeMigration('schedule_bounds', async (old, version) => {
      const table = tableIn(TEST_SCHEMA, 'schedules');
      await old.query(
        `INSERT INTO ${table} (name, cron, kind, catch_up_ms, next_run_at, last_run_at) VALUES
         ('centuries', '* * * * *', 'k', 31536000000000, now(), '-infinity'),
         ('never', '* * * * *', 'k', 0, 'infinity', NULL)`,
      );
      const applied = await migrate(old.pool, TEST_SCHEMA);
      expect(applied.applied).toContain(version);
      const rows = await old.query<Record<string, unknown>>(
        `SELECT name, catch_up_ms, isfinite(next_run_at) AS finite, last_run_at, parked_reason FROM ${table} ORDER BY name`,
      );
      expect(rows).toEqual([
        {
          name: 'centuries',
          catch_up_ms: '315360000000',
          finite: true,
          last_run_at: null,
          parked_reason: null,
        },
        { name: 'never', catch_up_ms: '0', finite: true, last_run_at: null, parked_reason: null },
      ]);
    });
  });
});
