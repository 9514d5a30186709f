/** waitFor: from another process, for every final status, deleted on success, timeouts, aborts, one LISTEN connection. */
import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { quoteIdent } from '../src/db/sql.js';
import {
  JobNotFoundError,
  PermanentError,
  Skiplock,
  ValidationError,
  WaitTimeoutError,
} from '../src/index.js';
import { waitFor, waitForBlockedBy } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';
import { forkScript, killedAfterTest, sent } from './support/processes.js';

const t = useTestDatabase();

/** Messages of a waiter process, by job id. */
function collect(child: ChildProcess): Map<string, unknown> {
  const received = new Map<string, unknown>();
  child.on('message', (m) => {
    if (typeof m === 'object' && m !== null && 'id' in m) {
      const { id, ...rest } = m as { id: string };
      received.set(id, rest);
    }
  });
  return received;
}

/** Resolves once every job of `ids` is marked as awaited. */
async function awaited(ids: string[]): Promise<void> {
  await waitFor(
    async () => (await t.jobCount('id = ANY($1::bigint[]) AND awaited', [ids])) === ids.length,
    30_000,
    'the waiters to mark their jobs',
  );
}

/** The LISTEN connections on this test's completion channel. */
async function listeners(): Promise<number> {
  const rows = await t.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1',
    // Quoted as the library quotes it: a schema name may hold a double quote.
    [`LISTEN ${quoteIdent(`skipdone:${t.schema}`)}`],
  );
  return rows[0]!.n;
}

describe('waitFor', () => {
  it('resolves in another process for succeeded, dead, failed, cancelled and deleted-on-success jobs', async () => {
    const release = gate();
    const kept = await t.skiplock.enqueue('ok', { n: 2 }, { onSuccess: 'keep' });
    const deleted = await t.skiplock.enqueue('ok', { n: 3 });
    const dead = await t.skiplock.enqueue('boom', {}, { maxAttempts: 1 });
    const failed = await t.skiplock.enqueue('never', {});
    const cancelled = await t.skiplock.enqueue('idle', {}, { queue: 'elsewhere' });
    const ids = [kept.id, deleted.id, dead.id, failed.id, cancelled.id];
    const child = killedAfterTest(
      t,
      forkScript('./../processes/waiter-process.ts', {
        SKIPLOCK_URL: t.url,
        SKIPLOCK_SCHEMA: t.schema,
        JOB_IDS: ids.join(','),
      }),
    );
    const received = collect(child);
    await sent(child, 'ready');
    await awaited(ids);
    const worker = t.worker({
      pollIntervalMs: 100,
      handlers: {
        ok: async (job) => {
          await release.opened;
          return (job.payload as { n: number }).n * 10;
        },
        boom: () => {
          throw new Error('boom');
        },
        never: () => {
          throw new PermanentError('not this one');
        },
      },
    });
    await worker.start();
    await t.skiplock.cancel({ ids: [cancelled.id] });
    release.open();
    await waitFor(
      () => received.size === ids.length,
      30_000,
      'every outcome',
      () => received,
    );
    const lastError = async (id: string) => (await t.row(id))?.last_error;
    expect(Object.fromEntries(received)).toEqual({
      [kept.id]: { outcome: { status: 'succeeded', result: 20, lastError: null } },
      [deleted.id]: { outcome: { status: 'succeeded', result: null, lastError: null } },
      [dead.id]: { outcome: { status: 'dead', result: null, lastError: await lastError(dead.id) } },
      [failed.id]: { outcome: { status: 'failed', result: null, lastError: await lastError(failed.id) } },
      [cancelled.id]: { outcome: { status: 'cancelled', result: null, lastError: null } },
    });
    expect(await lastError(dead.id)).toMatch(/^Error: boom/);
  });

  it('resolves at once for a job already final, and rejects for a job that does not exist', async () => {
    await t.query(`INSERT INTO ${t.jobs} (kind, status, last_error) VALUES ('x', 'dead', 'gone wrong')`);
    const id = (await t.query<{ id: string }>(`SELECT id FROM ${t.jobs}`))[0]?.id;
    expect(await t.skiplock.waitFor(id!)).toEqual({ status: 'dead', result: null, lastError: 'gone wrong' });
    // A success after failed attempts: the last failure stays in the row, not in the outcome.
    await t.query(
      `INSERT INTO ${t.jobs} (kind, status, attempts, last_error) VALUES ('x', 'succeeded', 2, 'first try failed')`,
    );
    const [retried] = await t.query<{ id: string }>(`SELECT id FROM ${t.jobs} WHERE status = 'succeeded'`);
    expect(await t.skiplock.waitFor(retried!.id)).toEqual({
      status: 'succeeded',
      result: null,
      lastError: null,
    });
    for (const options of [{ timeout: 500 }, { client: t.db.pool }, null]) {
      const error = await t.skiplock.waitFor(id!, options as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(
        options ? `options.${Object.keys(options)[0]}` : 'options',
      );
    }
    const missing = t.skiplock.waitFor('987654321');
    await expect(missing).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(missing).rejects.toMatchObject({ code: 'JOB_NOT_FOUND', jobId: '987654321' });
    await expect(t.skiplock.waitFor('abc')).rejects.toMatchObject({ field: 'id' });
    // Past bigint: refused as bad input, not sent to the server.
    await expect(t.skiplock.waitFor('9223372036854775808')).rejects.toMatchObject({
      name: 'ValidationError',
      field: 'id',
      reason: 'must be a job id (a decimal string within bigint range)',
    });
    await expect(t.skiplock.waitFor(id!, { timeoutMs: -1 })).rejects.toBeInstanceOf(ValidationError);
  });

  it('rejects with a timeout error naming the job, and with the reason of an aborted signal', async () => {
    const job = await t.skiplock.enqueue('nobody', {});
    const timedOut = t.skiplock.waitFor(job.id, { timeoutMs: 300 });
    await expect(timedOut).rejects.toBeInstanceOf(WaitTimeoutError);
    await expect(timedOut).rejects.toMatchObject({
      code: 'WAIT_TIMEOUT',
      jobId: job.id,
      message: `job ${job.id} did not reach a final status within 300 ms`,
    });
    const controller = new AbortController();
    const aborted = t.skiplock.waitFor(job.id, { signal: controller.signal });
    const reason = new Error('no longer needed');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    await expect(t.skiplock.waitFor(job.id, { signal: controller.signal })).rejects.toBe(reason);
    await waitFor(async () => (await listeners()) === 0, 10_000, 'the listener to close');
  });

  it('a timeout shorter than the first read: a missing job is still not found, a final one resolves, an unfinished one times out', async () => {
    // 1 ms: past before the LISTEN connection opens, let alone before the job is read.
    const missing = t.skiplock.waitFor('987654321', { timeoutMs: 1 });
    await expect(missing).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(missing).rejects.toMatchObject({ code: 'JOB_NOT_FOUND', jobId: '987654321' });
    const done = await t.skiplock.enqueue('done', {}, { onSuccess: 'keep' });
    await t.query(
      `UPDATE ${t.jobs} SET status = 'succeeded', finished_at = now(), result = '7' WHERE id = $1`,
      [done.id],
    );
    expect(await t.skiplock.waitFor(done.id, { timeoutMs: 1 })).toEqual({
      status: 'succeeded',
      result: 7,
      lastError: null,
    });
    const job = await t.skiplock.enqueue('nobody', {});
    await expect(t.skiplock.waitFor(job.id, { timeoutMs: 1 })).rejects.toMatchObject({
      name: 'WaitTimeoutError',
      code: 'WAIT_TIMEOUT',
      jobId: job.id,
    });
    await waitFor(async () => (await listeners()) === 0, 10_000, 'the listener to close');
  });

  it('a first read that gets no answer delays the timeout by at most the grace, not the statement deadline', async () => {
    const job = await t.skiplock.enqueue('nobody', {});
    // Another transaction holds the job's row: the read (which marks the row awaited) waits for it.
    const holder = await t.db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1 FOR UPDATE`, [job.id]);
      await expect(t.skiplock.waitFor(job.id, { timeoutMs: 50 })).rejects.toMatchObject({
        name: 'WaitTimeoutError',
        jobId: job.id,
      });
      // Rejected while the row was still held: the read never answered.
      expect(await holder.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1`, [job.id])).toMatchObject({
        rowCount: 1,
      });
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
    }
  });

  it('a schema name of 54 bytes, the longest allowed: the awaited job ends and its completion message comes', async () => {
    const schema = `${t.schema}_${'l'.repeat(54)}`.slice(-54);
    expect(Buffer.byteLength(schema)).toBe(54);
    const skiplock = new Skiplock({ pool: t.db.pool, schema });
    await skiplock.migrate();
    const listener = await t.db.pool.connect();
    t.defer(() => listener.release());
    const messages: { channel: string; message: unknown }[] = [];
    listener.on('notification', (n) =>
      messages.push({ channel: n.channel, message: JSON.parse(n.payload!) }),
    );
    await listener.query(`LISTEN ${quoteIdent(`skipdone:${schema}`)}`);
    const job = await skiplock.enqueue('long', {}, { onSuccess: 'keep' });
    const outcome = skiplock.waitFor(job.id, { timeoutMs: 60_000 });
    await waitFor(
      async () =>
        (await t.query(`SELECT 1 FROM ${quoteIdent(schema)}.jobs WHERE id = $1 AND awaited`, [job.id]))
          .length === 1,
      30_000,
      'the waiter to mark its job',
    );
    const worker = t.track(skiplock.worker({ handlers: { long: () => 54 }, handleSignals: false }));
    await worker.start();
    expect(await outcome).toEqual({ status: 'succeeded', result: 54, lastError: null });
    await waitFor(async () => messages.length > 0, 30_000, 'the completion message');
    expect(messages).toEqual([
      { channel: `skipdone:${schema}`, message: { type: 'done', queue: null, delayMs: 0, ids: [job.id] } },
    ]);
  });

  it('a job that ends while the wait marks its row resolves at once, not at the poll', async () => {
    // Another wait keeps the shared LISTEN connection open, so this one reads once, through its mark.
    const other = await t.skiplock.enqueue('never', {});
    const otherWait = t.skiplock.waitFor(other.id, { timeoutMs: 60_000 }).catch(() => {});
    await awaited([other.id]);
    const job = await t.skiplock.enqueue('ends', {}, { onSuccess: 'keep' });
    const ending = await t.db.pool.connect();
    t.defer(() => ending.release());
    await ending.query('BEGIN');
    await ending.query(
      `UPDATE ${t.jobs} SET status = 'succeeded', finished_at = now(), result = '"done"' WHERE id = $1`,
      [job.id],
    );
    const [{ pid }] = (await ending.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows as [
      { pid: number },
    ];
    // Well below the poll's interval: only the mark's own re-read can answer in time.
    const outcome = t.skiplock.waitFor(job.id, { timeoutMs: 3000 });
    await waitForBlockedBy(t.db.pool, pid, 'the wait to mark the locked row');
    await ending.query('COMMIT');
    expect(await outcome).toEqual({ status: 'succeeded', result: 'done', lastError: null });
    await t.query(`UPDATE ${t.jobs} SET status = 'cancelled', finished_at = now() WHERE id = $1`, [other.id]);
    await otherWait;
  });

  it('resolves by the poll when no message comes (the row deleted with the triggers off)', async () => {
    const job = await t.skiplock.enqueue('silent', {});
    const outcome = t.skiplock.waitFor(job.id, { timeoutMs: 60_000 });
    await awaited([job.id]);
    await t.query(`ALTER TABLE ${t.jobs} DISABLE TRIGGER jobs_done_delete`);
    await t.query(`DELETE FROM ${t.jobs} WHERE id = $1`, [job.id]);
    expect(await outcome).toEqual({ status: 'succeeded', result: null, lastError: null });
  });

  it('serves 2,000 concurrent waiters with one LISTEN connection, closed after the last', async () => {
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 2000 }, (_, i) => ({ kind: 'many', payload: { i } })),
    );
    const outcomes = Promise.all(jobs.map((j) => t.skiplock.waitFor(j.id, { timeoutMs: 120_000 })));
    await awaited(jobs.map((j) => j.id));
    expect(await listeners()).toBe(1);
    const worker = t.worker({ pollIntervalMs: 100, concurrency: 50, handlers: { many: () => {} } });
    await worker.start();
    const done = await outcomes;
    expect(new Set(done.map((o) => JSON.stringify(o)))).toEqual(
      new Set([JSON.stringify({ status: 'succeeded', result: null, lastError: null })]),
    );
    await waitFor(async () => (await listeners()) === 0, 10_000, 'the listener to close');
  });
});
