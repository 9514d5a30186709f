/**
 * The finish statement family on PostgreSQL: any mix of outcomes written by
 * one statement, each fenced by its lease; a stale lease changes nothing; a
 * job whose cancel was requested ends `cancelled`. A property test holds
 * random batches to a simple model of the rules.
 */
import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Queryable } from '../src/db/executor.js';
import type { AttemptResult, FinishOutcome, SuccessPolicy } from '../src/db/queries/finish.js';
import { type LeasedJob, leaseKey } from '../src/db/queries/job-row.js';
import { JobQueries } from '../src/db/queries/jobs.js';
import { type TestContext, useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();
const WORKER = 'w-finish';

/** A running job to seed; its lease is `leaseSeq` unless `stale` says how the lease was lost. */
interface RunningJob {
  attempts: number;
  maxAttempts: number;
  cancelRequested?: boolean;
  /** The lease the batch names is not the row's: claimed again, held by another worker, or no longer running. */
  stale?: 'claimed-again' | 'other-worker' | 'queued' | undefined;
}

/** Inserts the jobs (running, with run_at an hour ago); returns the leases the batch names, in order. */
async function seed(db: Queryable, jobs: string, running: RunningJob[]): Promise<LeasedJob[]> {
  const { rows } = await db.query(
    `INSERT INTO ${jobs} (kind, queue, status, run_at, attempts, max_attempts, locked_at, locked_by, lease_seq,
                          cancel_requested_at)
     SELECT 'k', 'q' || r.i, CASE WHEN r.stale = 'queued' THEN 'queued' ELSE 'running' END,
            now() - interval '1 hour', r.attempts, r.max_attempts,
            CASE WHEN r.stale = 'queued' THEN NULL ELSE now() END,
            CASE WHEN r.stale = 'queued' THEN NULL WHEN r.stale = 'other-worker' THEN 'w-other' ELSE $2 END,
            CASE WHEN r.stale = 'claimed-again' THEN 8 ELSE 7 END,
            CASE WHEN r.cancel THEN now() END
     FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                     AS (attempts int, max_attempts int, cancel boolean, stale text)) WITH ORDINALITY AS r(
            attempts, max_attempts, cancel, stale, i)
     ORDER BY r.i
     RETURNING id`,
    [
      JSON.stringify(
        running.map((r) => ({
          attempts: r.attempts,
          max_attempts: r.maxAttempts,
          cancel: r.cancelRequested ?? false,
          stale: r.stale ?? null,
        })),
      ),
      WORKER,
    ],
  );
  return running.map((r, i) => ({ id: String(rows[i].id), attempts: r.attempts, leaseSeq: '7' }));
}

/** Every column a finish may touch; times relative to the transaction's now(). */
async function rows(db: Queryable, jobs: string): Promise<Map<string, Record<string, unknown>>> {
  const { rows } = await db.query(
    `SELECT id::text, status, attempts, queue, last_error, locked_by, locked_at IS NULL AS unlocked,
            finished_at IS NOT NULL AS finished, lease_seq::text,
            (EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS run_in_ms,
            COALESCE(jsonb_array_length(errors), 0) AS history, errors->-1->>'error' AS history_error
     FROM ${jobs} ORDER BY id`,
  );
  return new Map(rows.map((r: Record<string, unknown>) => [r.id as string, r]));
}

/** Runs `body` in a transaction (so now() is one instant) on a connection that counts statements. */
async function inTransaction<T>(
  t: TestContext,
  body: (db: Queryable, statements: () => number) => Promise<T>,
): Promise<T> {
  const client: pg.PoolClient = await t.db.pool.connect();
  let sent = 0;
  const counting: Queryable = {
    query: (text, values) => {
      sent++;
      return client.query(text, values);
    },
  };
  try {
    await client.query('BEGIN');
    const result = await body(counting, () => sent);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

describe('finish', () => {
  it('writes a batch of every outcome in one statement, each row exactly, and leaves a stale lease alone', async () => {
    const queries = new JobQueries(t.schema);
    await inTransaction(t, async (db, statements) => {
      const leases = await seed(db, t.jobs, [
        { attempts: 1, maxAttempts: 5 }, // 0 success
        { attempts: 1, maxAttempts: 5 }, // 1 retry, default backoff
        { attempts: 2, maxAttempts: 5 }, // 2 retry, the kind's delay
        { attempts: 2, maxAttempts: 5 }, // 3 snooze
        { attempts: 1, maxAttempts: 5 }, // 4 permanent failure
        { attempts: 3, maxAttempts: 3 }, // 5 dead: out of attempts
        { attempts: 1, maxAttempts: 5, cancelRequested: true }, // 6 success, cancel requested
        { attempts: 2, maxAttempts: 2, cancelRequested: true }, // 7 failure, cancel requested
        { attempts: 1, maxAttempts: 5, stale: 'claimed-again' }, // 8 stale
      ]);
      const before = await rows(db, t.jobs);
      const results: AttemptResult[] = [
        { outcome: 'succeeded' },
        { outcome: 'failed', error: 'e1', permanent: false },
        { outcome: 'failed', error: 'e2', permanent: false, retryDelayMs: 5_000 },
        { outcome: 'snoozed', delayMs: 60_000 },
        { outcome: 'failed', error: 'e4', permanent: true },
        { outcome: 'failed', error: 'e5', permanent: false },
        { outcome: 'succeeded' },
        { outcome: 'failed', error: 'e7', permanent: false },
        { outcome: 'succeeded' },
      ];
      const sentBefore = statements();
      const written = await queries.finish.finish(
        db,
        leases.map((l, i) => ({ ...l, ...results[i]! })),
        WORKER,
        'keep',
      );
      expect(statements() - sentBefore).toBe(1);
      const after = await rows(db, t.jobs);
      const id = (i: number) => leases[i]!.id;
      const row = (i: number) => after.get(id(i))!;

      const byIndex = leases.map((l) => written.get(leaseKey(l)));
      expect(byIndex.map((w) => w?.outcome)).toEqual([
        'succeeded',
        'retry',
        'retry',
        'snoozed',
        'failed',
        'dead',
        'cancelled',
        'cancelled',
        undefined,
      ]);
      // A success comes back without its queue: the statement returns no row for it.
      expect(byIndex.map((w) => (w && 'queue' in w ? w.queue : undefined))).toEqual([
        undefined,
        'q2',
        'q3',
        'q4',
        'q5',
        'q6',
        'q7',
        'q8',
        undefined,
      ]);

      const ended = { locked_by: null, unlocked: true, lease_seq: '7' };
      const endedAs = (status: string, attempts: number, last_error: string | null, finished: boolean) => ({
        ...ended,
        status,
        attempts,
        last_error,
        finished,
      });
      expect(row(0)).toMatchObject(endedAs('succeeded', 1, null, true));
      expect(row(0).run_in_ms).toBe(-3_600_000);
      // Default backoff after attempt 1: 2 s × [0.5, 1).
      expect(row(1)).toMatchObject(endedAs('queued', 1, 'e1', false));
      expect(row(1).run_in_ms).toBeGreaterThanOrEqual(1_000);
      expect(row(1).run_in_ms).toBeLessThan(2_000);
      expect(byIndex[1]!.retryDelayMs).toBeCloseTo(row(1).run_in_ms as number, 6);
      expect(row(1)).toMatchObject({ history: 1, history_error: 'e1' });
      expect(row(2)).toMatchObject({ ...ended, status: 'queued', attempts: 2, last_error: 'e2', history: 1 });
      expect(row(2).run_in_ms).toBeCloseTo(5_000, 6);
      expect(byIndex[2]!.retryDelayMs).toBeCloseTo(5_000, 6);
      // A snooze does not charge the attempt, records no error, and is due after its delay.
      expect(row(3)).toMatchObject({ ...ended, status: 'queued', attempts: 1, last_error: null, history: 0 });
      expect(row(3).run_in_ms).toBeCloseTo(60_000, 6);
      expect(byIndex[3]!.retryDelayMs).toBe(60_000);
      expect(row(4)).toMatchObject(endedAs('failed', 1, 'e4', true));
      expect(row(4).run_in_ms).toBe(-3_600_000);
      expect(row(5)).toMatchObject(endedAs('dead', 3, 'e5', true));
      expect(row(5).run_in_ms).toBe(-3_600_000);
      expect(row(5)).toMatchObject({ history: 1, history_error: 'e5' });
      // Cancelled whatever the attempt returned: attempt charged, no error recorded.
      for (const i of [6, 7]) {
        expect(row(i)).toMatchObject({
          ...ended,
          status: 'cancelled',
          last_error: null,
          finished: true,
          history: 0,
        });
        expect(row(i).run_in_ms).toBe(-3_600_000);
        expect(byIndex[i]!.retryDelayMs).toBe(0);
      }
      expect([row(6).attempts, row(7).attempts]).toEqual([1, 2]);
      expect(row(8)).toEqual(before.get(id(8)));
    });
  });

  it('a success-only batch ends each job by the policy, in one statement (and one to keep parents when some success was not written)', async () => {
    const queries = new JobQueries(t.schema);
    for (const policy of ['delete', 'keep', 'archive'] as const) {
      await t.query(`DELETE FROM ${t.jobs}`);
      await inTransaction(t, async (db, statements) => {
        const leases = await seed(db, t.jobs, [
          { attempts: 1, maxAttempts: 5 },
          { attempts: 1, maxAttempts: 5, cancelRequested: true },
          { attempts: 1, maxAttempts: 5, stale: 'other-worker' },
        ]);
        // The archive keeps the row's columns, tags included.
        await db.query(`UPDATE ${t.jobs} SET tags = '{t1,t2}' WHERE id = $1`, [leases[0]!.id]);
        const sentBefore = statements();
        const written = await queries.finish.finish(
          db,
          leases.map((l) => ({ ...l, outcome: 'succeeded' as const })),
          WORKER,
          policy,
        );
        // The cancelled and the stale job are successes the first statement did not write.
        expect(statements() - sentBefore).toBe(policy === 'keep' ? 1 : 2);
        expect(
          leases.map((l) => written.get(leaseKey(l))?.outcome),
          policy,
        ).toEqual(['succeeded', 'cancelled', undefined]);
        const after = await rows(db, t.jobs);
        expect(after.get(leases[0]!.id)?.status, policy).toBe(policy === 'keep' ? 'succeeded' : undefined);
        expect(after.get(leases[1]!.id)?.status).toBe('cancelled');
        expect(after.get(leases[2]!.id)).toMatchObject({ status: 'running', locked_by: 'w-other' });
        const { rows: archived } = await db.query(`SELECT id::text, status, tags FROM ${t.archive}`);
        expect(archived, policy).toEqual(
          policy === 'archive' ? [{ id: leases[0]!.id, status: 'succeeded', tags: ['t1', 't2'] }] : [],
        );
      });
    }
  });

  it('finds a batch of 1,000 through the primary key, never by reading the whole table', async () => {
    // 30,000 queued jobs (never analyzed, as a fresh backlog is), 1,000 of them held. Given
    // the batch's ids as a constant array, PostgreSQL 15 read the whole table instead
    // (17 and later judge such lookups cheaper).
    await t.query(`DELETE FROM ${t.jobs}`);
    await t.query(`INSERT INTO ${t.jobs} (kind, payload) SELECT 'k', '{}' FROM generate_series(1, 30000)`);
    const held = await t.query<{ id: string }>(
      `UPDATE ${t.jobs} SET status = 'running', attempts = 1, lease_seq = 1, locked_at = now(), locked_by = $1
       WHERE id IN (SELECT id FROM ${t.jobs} ORDER BY id LIMIT 1000 OFFSET 10000) RETURNING id::text`,
      [WORKER],
    );
    const batch = held.map((r) => ({
      id: r.id,
      attempts: 1,
      leaseSeq: '1',
      outcome: 'succeeded' as const,
    }));
    const plans: string[] = [];
    const explaining: Queryable = {
      query: async (text, values) => {
        const { rows } = await t.db.pool.query(`EXPLAIN (FORMAT JSON) ${text}`, values);
        plans.push(JSON.stringify(rows[0]['QUERY PLAN']));
        return { rows: [], rowCount: 0 };
      },
    };
    await new JobQueries(t.schema).finish.finish(explaining, batch, WORKER, 'delete');
    expect(plans.length).toBeGreaterThan(0);
    for (const plan of plans) {
      const scans = [...plan.matchAll(/"Node Type":"([^"]+)"[^{}]*?"Relation Name":"jobs"/g)].map(
        (m) => m[1],
      );
      expect(scans.length).toBeGreaterThan(0);
      expect(scans.filter((scan) => scan === 'Seq Scan')).toEqual([]);
    }
  });

  it('of two leases of one job in a batch, only the newer is written', async () => {
    const queries = new JobQueries(t.schema);
    const [lease] = await seed(t.db.pool, t.jobs, [{ attempts: 1, maxAttempts: 5 }]);
    const older = { ...lease!, leaseSeq: '6' };
    const written = await queries.finish.finish(
      t.db.pool,
      [
        { ...older, outcome: 'succeeded' },
        { ...lease!, outcome: 'failed', error: 'x', permanent: true },
      ],
      WORKER,
      'keep',
    );
    expect([...written.values()].map((w) => [w.leaseSeq, w.outcome])).toEqual([['7', 'failed']]);
  });
});

/** One job of a random batch: how its row stands and what its attempt returned. */
interface Case extends RunningJob {
  result: AttemptResult;
}

const cases = fc.array(
  fc.record({
    attempts: fc.integer({ min: 1, max: 4 }),
    maxAttempts: fc.integer({ min: 1, max: 4 }),
    cancelRequested: fc.boolean(),
    stale: fc.option(fc.constantFrom('claimed-again' as const, 'other-worker' as const, 'queued' as const), {
      nil: undefined,
    }),
    result: fc.oneof(
      fc.constant<AttemptResult>({ outcome: 'succeeded' }),
      fc.record({
        outcome: fc.constant('failed' as const),
        error: fc.string({ maxLength: 20 }),
        permanent: fc.boolean(),
        retryDelayMs: fc.option(fc.integer({ min: 0, max: 100_000 }), { nil: undefined }),
      }),
      fc.record({ outcome: fc.constant('snoozed' as const), delayMs: fc.integer({ min: 0, max: 100_000 }) }),
    ),
  }),
  { minLength: 1, maxLength: 12 },
);

/** What the model says a job becomes: undefined when its lease is stale (nothing is written). */
function expected(c: Case): { outcome: FinishOutcome; status: string; attempts: number } | undefined {
  if (c.stale) return undefined;
  if (c.cancelRequested) return { outcome: 'cancelled', status: 'cancelled', attempts: c.attempts };
  const r = c.result;
  if (r.outcome === 'succeeded') return { outcome: 'succeeded', status: 'succeeded', attempts: c.attempts };
  if (r.outcome === 'snoozed') return { outcome: 'snoozed', status: 'queued', attempts: c.attempts - 1 };
  if (r.outcome === 'failed' && r.permanent)
    return { outcome: 'failed', status: 'failed', attempts: c.attempts };
  if (c.attempts >= c.maxAttempts) return { outcome: 'dead', status: 'dead', attempts: c.attempts };
  return { outcome: 'retry', status: 'queued', attempts: c.attempts };
}

describe('finish, against a model', () => {
  it('any mix of outcomes and stale leases, under any policy, is written as the model says', async () => {
    const queries = new JobQueries(t.schema);
    await fc.assert(
      fc.asyncProperty(
        cases,
        fc.constantFrom<SuccessPolicy>('delete', 'keep', 'archive'),
        async (batch, policy) => {
          await t.query(`DELETE FROM ${t.jobs}`);
          await t.query(`DELETE FROM ${t.archive}`);
          await inTransaction(t, async (db, statements) => {
            const leases = await seed(db, t.jobs, batch);
            const before = await rows(db, t.jobs);
            const sentBefore = statements();
            const written = await queries.finish.finish(
              db,
              leases.map((l, i) => ({ ...l, ...batch[i]!.result })),
              WORKER,
              policy,
            );
            // A second statement, to keep parents for their children, only for the successes under
            // 'delete' or 'archive' that the first wrote nothing for (a stale lease; a cancel
            // requested is written by the first, as cancelled).
            const unwritten = batch.some(
              (c) => c.result.outcome === 'succeeded' && expected(c) === undefined,
            );
            expect(statements() - sentBefore).toBe(policy !== 'keep' && unwritten ? 2 : 1);
            const after = await rows(db, t.jobs);
            for (const [i, c] of batch.entries()) {
              const lease = leases[i]!;
              const want = expected(c);
              const got = written.get(leaseKey(lease));
              const row = after.get(lease.id);
              if (!want) {
                expect(got).toBeUndefined();
                expect(row).toEqual(before.get(lease.id));
                continue;
              }
              expect(got?.outcome).toBe(want.outcome);
              if (want.outcome === 'succeeded' && policy !== 'keep') {
                expect(row).toBeUndefined();
                continue;
              }
              expect(row).toMatchObject({ status: want.status, attempts: want.attempts, locked_by: null });
              const r = c.result;
              if (want.outcome === 'retry' && r.outcome === 'failed') {
                const delay = r.retryDelayMs;
                if (delay !== undefined) expect(row!.run_in_ms).toBeCloseTo(delay, 3);
                else {
                  const baseMs = Math.min(1000 * 2 ** c.attempts, 3_600_000);
                  expect(row!.run_in_ms).toBeGreaterThanOrEqual(baseMs * 0.5);
                  expect(row!.run_in_ms).toBeLessThan(baseMs);
                }
                expect(got!.retryDelayMs).toBeCloseTo(row!.run_in_ms as number, 3);
              } else if (want.outcome === 'snoozed' && r.outcome === 'snoozed') {
                expect(row!.run_in_ms).toBeCloseTo(r.delayMs, 3);
                expect(got!.retryDelayMs).toBe(r.delayMs);
              } else {
                expect(row!.run_in_ms).toBe(-3_600_000);
                expect(got!.retryDelayMs).toBe(0);
              }
              const failed = want.outcome === 'retry' || want.outcome === 'failed' || want.outcome === 'dead';
              expect(row!.last_error).toBe(failed && r.outcome === 'failed' ? r.error : null);
              expect(row!.history).toBe(failed ? 1 : 0);
              expect(row!.finished).toBe(want.status !== 'queued');
            }
          });
        },
      ),
      { numRuns: 60 },
    );
  });
});
