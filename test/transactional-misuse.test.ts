/**
 * Transactional handlers that misuse their connection or outlive their
 * attempt: a statement still running on the server when the attempt ends
 * (its session is terminated, its locks freed), a handler that releases its
 * client or ends its transaction itself (refused at the call; the worker
 * keeps running).
 */
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import type { TransactionalHandlerContext } from '../src/index.js';
import { countRows, tableIn, waitFor } from './support/database.js';
import { eventOf, nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const effects = () => tableIn(t.schema, 'misuse_effects');
const accounts = () => tableIn(t.schema, 'misuse_accounts');

beforeEach(async () => {
  await t.query(`CREATE TABLE ${effects()} (job_id bigint NOT NULL, note text)`);
  await t.query(`CREATE TABLE ${accounts()} (id int PRIMARY KEY, n int NOT NULL)`);
  await t.query(`INSERT INTO ${accounts()} VALUES (1, 0)`);
});

type Handle = (job: { id: string; attempts: number }, context: TransactionalHandlerContext) => unknown;

function worker(handle: Handle, timeoutMs?: number) {
  return t.worker({
    pollIntervalMs: 100,
    queues: ['misuse'],
    handlers: {
      txn: { transactional: true, handle, ...(timeoutMs === undefined ? {} : { timeoutMs }) },
      plain: () => {},
    },
  });
}

describe('a transactional attempt that ends while its statement runs on', () => {
  it('has its server session terminated: the row lock is free again, the next attempt gets it', async () => {
    const marker = `misuse-sleep-${t.schema}`;
    const attempts: number[] = [];
    const w = worker(async (job, { client }) => {
      attempts.push(job.attempts);
      await client.query(`UPDATE ${accounts()} SET n = n + 1 WHERE id = 1`);
      // Only the first attempt hangs, holding the row lock on the server.
      if (job.attempts === 1) await client.query(`SELECT pg_sleep(60) /* ${marker} */`);
    }, 1000);
    await w.start();
    const [job, [, thrown]] = await eventOf(w, 'job:failure', () =>
      t.skiplock.enqueue('txn', {}, { queue: 'misuse', maxAttempts: 3 }),
    );
    expect((thrown as Error).name).toBe('JobTimeoutError');
    // The sleeping statement's session is gone within seconds, not after 60 s.
    await waitFor(
      async () =>
        (await countRows(t.db.pool, 'pg_stat_activity', 'query LIKE $1 AND pid <> pg_backend_pid()', [
          `%${marker}%`,
        ])) === 0,
      10_000,
      'the hung session to be terminated',
    );
    // The row lock is free: another session takes it at once.
    const lock = await t.db.pool.connect();
    try {
      await lock.query('BEGIN');
      await lock.query(`SELECT n FROM ${accounts()} WHERE id = 1 FOR UPDATE NOWAIT`);
      await lock.query('ROLLBACK');
    } finally {
      lock.release();
    }
    // The retry (due after its backoff) runs and commits once.
    await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1 AND status = 'queued'`, [job.id]);
    await waitFor(async () => (await t.jobCount('id = $1', [job.id])) === 0, 15_000, 'the retry to succeed');
    expect(attempts).toEqual([1, 2]);
    const [row] = await t.query<{ n: number }>(`SELECT n FROM ${accounts()} WHERE id = 1`);
    expect(row!.n).toBe(1);
  });
});

describe('a transactional handler that misuses its client', () => {
  it('release(): refused; the attempt fails and rolls back, and the worker runs on', async () => {
    const w = worker(async (job, { client }) => {
      await client.query(`INSERT INTO ${effects()} VALUES ($1, 'before release')`, [job.id]);
      client.release();
    });
    await w.start();
    const [job, [, thrown]] = await eventOf(w, 'job:failure', () =>
      t.skiplock.enqueue('txn', {}, { queue: 'misuse' }),
    );
    expect((thrown as Error).name).toBe('TransactionMisuseError');
    expect(await countRows(t.db.pool, effects())).toBe(0);
    expect(await t.row(job.id)).toMatchObject({ status: 'queued', attempts: 1, locked_by: null });
    expect((await t.row(job.id))!.last_error).toMatch(/do not release it/);
    // The worker still works.
    const succeeded = nextEvent(w, 'job:success');
    const next = await t.skiplock.enqueue('plain', {}, { queue: 'misuse' });
    expect((await succeeded)[0].id).toBe(next.id);
  });

  it.each([
    'COMMIT',
    'commit;',
    ' ROLLBACK',
    'END',
    'BEGIN',
    'START TRANSACTION',
    'ABORT',
    '/* c */ COMMIT',
    '-- x\nCOMMIT',
    '; ROLLBACK',
  ])('%s: refused, nothing of the attempt commits', async (statement) => {
    const refused: unknown[] = [];
    const w = worker(async (job, { client }) => {
      await client.query(`INSERT INTO ${effects()} VALUES ($1, 'first')`, [job.id]);
      try {
        await client.query(statement);
      } catch (error) {
        refused.push(error);
        throw error;
      }
    });
    await w.start();
    const [job] = await eventOf(w, 'job:failure', () => t.skiplock.enqueue('txn', {}, { queue: 'misuse' }));
    expect(refused).toHaveLength(1);
    expect((refused[0] as Error).name).toBe('TransactionMisuseError');
    expect(await countRows(t.db.pool, effects())).toBe(0);
    expect(await t.row(job.id)).toMatchObject({ status: 'queued', attempts: 1 });
  });

  // Hidden in a multi-statement string, where the refusal above cannot see it (the last ones leave a
  // transaction open), sent in each form query() takes, and whatever the handler does next.
  it.each([
    ['COMMIT', 'awaited', 1],
    ['COMMIT; BEGIN', 'awaited', 1],
    ['ROLLBACK; BEGIN', 'awaited', 0],
    ['COMMIT; BEGIN', 'awaited, then the handler throws', 1],
    ['COMMIT', 'awaited, then the handler throws', 1],
    ['COMMIT; BEGIN', 'with a callback', 1],
    ['COMMIT; BEGIN', 'as a query object', 1],
  ])(
    'a hidden "%s" sent %s: the job is not completed, and ends failed (no retry)',
    async (control, how, kept) => {
      const w = worker(async (job, { client }) => {
        const sql = `INSERT INTO ${effects()} VALUES (${Number(job.id)}, 'sneaky'); ${control}`;
        if (how === 'with a callback')
          await new Promise<void>((resolve, reject) =>
            client.query(sql, (e: Error) => (e ? reject(e) : resolve())),
          );
        else if (how === 'as a query object')
          await new Promise<void>((resolve, reject) => {
            const query = client.query(new pg.Query(sql) as never) as unknown as pg.Query;
            query.on('end', () => resolve());
            query.on('error', reject);
          });
        else await client.query(sql);
        if (how.endsWith('throws')) throw new Error('later');
      });
      await w.start();
      const [job, [, thrown, outcome]] = await eventOf(w, 'job:failure', () =>
        t.skiplock.enqueue('txn', {}, { queue: 'misuse' }),
      );
      expect((thrown as Error).name).toBe('TransactionMisuseError');
      expect(outcome.status).toBe('failed');
      expect(await t.row(job.id)).toMatchObject({ status: 'failed', attempts: 1 });
      // What the handler committed itself stays: the error says so.
      expect((await t.row(job.id))!.last_error).toMatch(/what the handler committed stays/);
      expect(await countRows(t.db.pool, effects())).toBe(kept);
    },
  );

  it('SAVEPOINT and ROLLBACK TO SAVEPOINT pass', async () => {
    const w = worker(async (job, { client }) => {
      await client.query('SAVEPOINT s');
      await client.query(`INSERT INTO ${effects()} VALUES ($1, 'undone')`, [job.id]);
      await client.query('ROLLBACK TO SAVEPOINT s');
      await client.query(`INSERT INTO ${effects()} VALUES ($1, 'kept')`, [job.id]);
    });
    await w.start();
    const [job] = await eventOf(w, 'job:success', () => t.skiplock.enqueue('txn', {}, { queue: 'misuse' }));
    expect(await t.query(`SELECT job_id, note FROM ${effects()}`)).toEqual([
      { job_id: job.id, note: 'kept' },
    ]);
  });
});
