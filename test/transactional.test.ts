/**
 * Transactional handlers: the handler's writes on its `client` and the job's
 * completion commit together, or neither does (failure, lost lease, cancel,
 * timeout).
 */
import { randomBytes } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import {
  type JobMap,
  type JobOptions,
  Skiplock,
  type SkiplockError,
  type TransactionalHandler,
  type TransactionalHandlerContext,
  ValidationError,
  type Worker,
  type WorkerEvents,
  type WorkerOptions,
} from '../src/index.js';
import { drain } from '../src/testing/index.js';
import { countRows, onServer, quoteIdent, tableIn, waitFor } from './support/database.js';
import { eventOf, nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { type Gate, gate } from './support/gate.js';

const t = useTestDatabase();

/** The table the handlers write to, in the test's schema (job ids start again in each). */
const effects = () => tableIn(t.schema, 'txn_effects');
const effectRows = (jobId: string) => countRows(t.db.pool, effects(), 'job_id = $1', [jobId]);

beforeEach(async () => {
  await t.query(`CREATE TABLE ${effects()} (job_id bigint NOT NULL, note text)`);
});

/** A deferred constraint trigger on the effects table that runs `body` (PL/pgSQL) at COMMIT. */
async function deferredTrigger(body: string): Promise<void> {
  const fn = tableIn(t.schema, 'txn_at_commit');
  await t.query(`
    CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ${body}; RETURN NULL; END $$;
    CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON ${effects()}
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${fn}();
  `);
}

/** A handler that inserts its effect row, then runs `then` (inside the transaction). */
function inserting(then: (jobId: string) => unknown = () => {}): TransactionalHandler<string, unknown> {
  return async (job, { client }) => {
    await client.query(`INSERT INTO ${effects()} (job_id, note) VALUES ($1, 'done')`, [job.id]);
    await then(job.id);
  };
}

/** Expects no effect row of the job (its transaction rolled back) and the job `status` after `attempts`, unlocked. */
async function expectRolledBack(jobId: string, status: string, attempts: number): Promise<void> {
  expect(await effectRows(jobId)).toBe(0);
  expect(await t.row(jobId)).toMatchObject({ status, attempts, locked_by: null });
}

/**
 * Starts `w`, enqueues a `txn` job, and waits for its first attempt to fail;
 * expects the attempt rolled back: no effect row, the job queued again for
 * attempt 2, its lease let go. Resolves with the job's id and what was thrown.
 */
async function rolledBackAttempt(w: Worker): Promise<{ id: string; thrown: Error }> {
  await w.start();
  const [job, [, thrown, outcome]] = await eventOf(w, 'job:failure', () =>
    t.skiplock.enqueue('txn', {}, { queue: 'txn' }),
  );
  expect(outcome.status).toBe('queued');
  await expectRolledBack(job.id, 'queued', 1);
  return { id: job.id, thrown: thrown as Error };
}

function worker(
  handle: TransactionalHandler<string, unknown>,
  options: Partial<WorkerOptions<JobMap>> = {},
): Worker {
  return t.worker({
    pollIntervalMs: 100,
    queues: ['txn'],
    handlers: { txn: { transactional: true, handle } },
    ...options,
  });
}

/** A handler that inserts, reports it is inside, then waits for the test. */
function parked(): { handle: TransactionalHandler<string, unknown>; inside: Gate<string>; go: Gate<void> } {
  const inside = gate<string>();
  const go = gate();
  const handle = inserting(async (jobId) => {
    inside.open(jobId);
    await go.opened;
  });
  return { handle, inside, go };
}

/** Leases that outlast a test with no heartbeat in it: only what the test does changes them. */
const RARE_HEARTBEATS = { visibilityTimeoutMs: 600_000, heartbeatIntervalMs: 500_000 };

/**
 * Starts a worker (`options`) whose handler parks inside its transaction,
 * enqueues a `txn` job (`jobOptions`), and waits until the handler holds it.
 * `next` is the worker's next `event`, listened for from before the enqueue;
 * `go` lets the handler finish.
 */
async function parkedJob<Name extends keyof WorkerEvents>(
  event: Name,
  options: Partial<WorkerOptions<JobMap>>,
  jobOptions: JobOptions = {},
) {
  const { handle, inside, go } = parked();
  const w = worker(handle, options);
  await w.start();
  const next = nextEvent(w, event);
  const job = await t.skiplock.enqueue('txn', {}, { queue: 'txn', ...jobOptions });
  await inside.opened;
  return { w, job, go, next };
}

describe('transactional handlers', () => {
  it.each(['delete', 'keep', 'archive'] as const)(
    'commit the handler’s row and the job’s completion together (onSuccess %s)',
    async (onSuccess) => {
      const { job, go, next: succeeded } = await parkedJob('job:success', { onSuccess });
      // Inserted but not committed: nobody else sees the row; the job is still running.
      expect(await effectRows(job.id)).toBe(0);
      expect(await t.row(job.id)).toMatchObject({ status: 'running', attempts: 1 });
      go.open();
      const [done] = await succeeded;
      expect(done.id).toBe(job.id);
      expect(await effectRows(job.id)).toBe(1);
      const hot = await t.query(`SELECT status, locked_by FROM ${t.jobs} WHERE id = $1`, [job.id]);
      const archived = await t.query(`SELECT status FROM ${t.archive} WHERE id = $1`, [job.id]);
      expect({ hot, archived }).toEqual({
        hot: onSuccess === 'keep' ? [{ status: 'succeeded', locked_by: null }] : [],
        archived: onSuccess === 'archive' ? [{ status: 'succeeded' }] : [],
      });
    },
  );

  it('roll back when the handler throws: no row, and the failure is written as usual', async () => {
    const w = worker(
      inserting(() => {
        throw new Error('card declined');
      }),
    );
    const { id, thrown } = await rolledBackAttempt(w);
    expect(thrown.message).toBe('card declined');
    expect((await t.row(id))!.last_error).toMatch(/^Error: card declined\n/);
  });

  it('roll back when the lease was reclaimed meanwhile: no row, and the job is left to its next claim', async () => {
    // Heartbeats too rare to notice: the completion's fence is what finds the lease gone.
    const { job, go, next: stale } = await parkedJob('job:stale', RARE_HEARTBEATS);
    // What the sweeper does to a lease it reclaims (and keep it from being claimed again at once).
    await t.query(
      `UPDATE ${t.jobs} SET status = 'queued', locked_by = NULL, locked_at = NULL,
         run_at = now() + interval '1 hour', last_error = 'reclaimed: visibility timeout'
       WHERE id = $1`,
      [job.id],
    );
    go.open();
    const [reported] = await stale;
    expect(reported.id).toBe(job.id);
    expect(await effectRows(job.id)).toBe(0);
    expect(await t.row(job.id)).toEqual({
      status: 'queued',
      attempts: 1,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });
  });

  it('roll back when the sweeper reclaims the job while the handler holds it', async () => {
    const noSweeps = { ...RARE_HEARTBEATS, sweepIntervalMs: 600_000 };
    const { job, go, next: stale } = await parkedJob('job:stale', noSweeps, { maxAttempts: 1 });
    // As if its heartbeats had stopped: the lease expired, and a sweep reclaims it (dead: out of attempts).
    await t.query(`UPDATE ${t.jobs} SET locked_at = now() - interval '1 hour' WHERE id = $1`, [job.id]);
    // Swept here, or by the worker's own first sweep should that come later under load.
    await waitFor(
      async () => {
        await t.skiplock.sweep();
        return (await t.row(job.id))?.status === 'dead';
      },
      15_000,
      'the sweep to reclaim the job',
    );
    go.open();
    await stale;
    await expectRolledBack(job.id, 'dead', 1);
  });

  it('roll back when the job is cancelled while it runs: no row, and it ends cancelled', async () => {
    const inside = gate<string>();
    const w = worker(
      inserting(async (jobId) => {
        inside.open(jobId);
        await new Promise(() => {}); // ignores its signal: the dropped connection rolls it back
      }),
    );
    await w.start();
    const cancelled = nextEvent(w, 'job:cancelled');
    const job = await t.skiplock.enqueue('txn', {}, { queue: 'txn' });
    await inside.opened;
    expect(await t.skiplock.cancel({ ids: [job.id] })).toEqual({ cancelled: 0, running: 1 });
    await cancelled;
    await expectRolledBack(job.id, 'cancelled', 1);
  });

  it('roll back a success whose cancel was requested unheard: the completion’s fence refuses it', async () => {
    const { job, go, next: cancelled } = await parkedJob('job:cancelled', RARE_HEARTBEATS);
    // The flag without the message (as if the message was lost and no heartbeat came yet).
    await t.query(`UPDATE ${t.jobs} SET cancel_requested_at = now() WHERE id = $1`, [job.id]);
    go.open();
    await cancelled;
    await expectRolledBack(job.id, 'cancelled', 1);
  });

  it('roll back at the timeout; a handler that writes after it finds its connection closed', async () => {
    const lateWrite = gate<unknown>();
    const w = t.worker({
      pollIntervalMs: 100,
      queues: ['txn'],
      handlers: {
        txn: {
          transactional: true,
          timeoutMs: 200,
          handle: async (job, { client, signal }: TransactionalHandlerContext) => {
            await client.query(`INSERT INTO ${effects()} (job_id, note) VALUES ($1, 'before')`, [job.id]);
            await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
            try {
              await client.query(`INSERT INTO ${effects()} (job_id, note) VALUES ($1, 'after')`, [job.id]);
              lateWrite.open('written');
            } catch (error) {
              lateWrite.open(error);
            }
          },
        },
      },
    });
    await w.start();
    const [job, [, thrown]] = await eventOf(w, 'job:failure', () =>
      t.skiplock.enqueue('txn', {}, { queue: 'txn' }),
    );
    expect((thrown as Error).name).toBe('JobTimeoutError');
    expect(await lateWrite.opened).toBeInstanceOf(Error);
    await expectRolledBack(job.id, 'queued', 1);
  });

  it('roll back what a stopped worker’s handler wrote, and give its job back', async () => {
    const { w, job, next: released } = await parkedJob('job:released', { shutdownTimeoutMs: 100 });
    await w.stop();
    await released;
    await expectRolledBack(job.id, 'queued', 0);
  });

  it('never return a connection inside a transaction; the handler may choose its isolation level', async () => {
    const levels: string[] = [];
    let n = 0;
    const w = worker(
      async (job, { client }) => {
        await client.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
        const { rows } = await client.query<{ level: string; fresh: boolean }>(
          `SELECT current_setting('transaction_isolation') AS level,
                  pg_current_xact_id_if_assigned() IS NULL AS fresh`,
        );
        levels.push(`${rows[0]!.level}:${rows[0]!.fresh}`);
        await client.query(`INSERT INTO ${effects()} (job_id, note) VALUES ($1, 'x')`, [job.id]);
        if (++n % 2 === 1) throw new Error('odd');
      },
      { concurrency: 1 },
    );
    await w.start();
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 6 }, (_, i) => ({ kind: 'txn', payload: { i }, queue: 'txn' })),
    );
    await waitFor(
      async () => n >= 6 && (await t.jobCount("status = 'running'")) === 0,
      15_000,
      'six attempts',
    );
    expect(await countRows(t.db.pool, effects())).toBe(3);
    expect(await t.jobCount('id = ANY($1::bigint[])', [jobs.map((j) => j.id)])).toBe(3);
    // Each attempt began a fresh transaction (no write of an earlier one assigned its xid).
    expect(levels.slice(0, 6)).toEqual(Array.from({ length: 6 }, () => 'serializable:true'));
    // A connection given back inside a transaction would idle in it for good; a
    // maintenance transaction of the worker's may do so for a moment between statements.
    const idleInTransaction = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'
             AND datname = current_database() AND pid <> pg_backend_pid()`,
        )
      )[0]!.n;
    await waitFor(
      async () => (await idleInTransaction()) === 0,
      5_000,
      'no connection idle in a transaction',
      idleInTransaction,
    );
  });

  it('roll back when COMMIT refuses (a deferred constraint), and write the failure', async () => {
    await deferredTrigger(`RAISE EXCEPTION 'rejected at commit'`);
    const w = worker(inserting());
    const { thrown } = await rolledBackAttempt(w);
    expect(thrown.message).toContain('rejected at commit');
  });

  it('tell from the row whether a COMMIT whose answer was lost committed: here it did, once', async () => {
    // COMMIT runs the trigger past the worker's deadline: the worker drops the connection, the server commits.
    await deferredTrigger('PERFORM pg_sleep(0.8)');
    const w = worker(inserting(), { onSuccess: 'keep', statementTimeoutMs: 300 });
    const errors: string[] = [];
    w.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    const reported = Promise.race([
      nextEvent(w, 'job:success').then(() => 'success'),
      nextEvent(w, 'job:stale').then(() => 'stale'),
      nextEvent(w, 'job:failure').then(() => 'failure'),
    ]);
    await w.start();
    const job = await t.skiplock.enqueue('txn', {}, { queue: 'txn' });
    // The worker's read of the row waited for the COMMIT to end, and found the job completed.

    expect(await reported).toBe('success');
    // Then the worker's read may itself wait past the deadline for the COMMIT's lock: it reads
    // again. The server's deadline, a little shorter, usually ends the read before the client's.
    expect(errors[0]).toBe('complete: COMMIT did not answer within 300 ms');
    for (const error of errors.slice(1))
      expect(error).toMatch(
        /^complete: (canceling statement due to statement timeout \(SQLSTATE 57014\)|Query read timeout: no answer within the statement deadline \(statementTimeoutMs\))$/,
      );
    expect(await effectRows(job.id)).toBe(1);
    expect(await t.row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1, locked_by: null });
  });

  it('commit follow-up jobs enqueued on the client with the job, or not at all', async () => {
    let fail = true;
    const w = worker(async (job, { client }) => {
      await t.skiplock.enqueue('follow_up', { after: job.id }, { client, queue: 'later' });
      if (fail) throw new Error('not yet');
    });
    await w.start();
    const [job] = await eventOf(w, 'job:failure', () => t.skiplock.enqueue('txn', {}, { queue: 'txn' }));
    expect(await t.jobCount("kind = 'follow_up'")).toBe(0);
    fail = false;
    const succeeded = nextEvent(w, 'job:success');
    await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [job.id]);
    await succeeded;
    const followUps = await t.query(`SELECT status, payload FROM ${t.jobs} WHERE kind = 'follow_up'`);
    expect(followUps).toEqual([{ status: 'queued', payload: { after: job.id } }]);
  });

  it('are refused unless `transactional` is a boolean', () => {
    let thrown: unknown;
    try {
      t.skiplock.worker({ handlers: { k: { transactional: 'yes', handle: () => {} } } } as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ValidationError);
    expect((thrown as ValidationError).field).toBe('worker.handlers.k.transactional');
  });

  it('run the same way under drain (skiplock/testing)', async () => {
    const ok = await t.skiplock.enqueue('txn', {}, { queue: 'txn' });
    const bad = await t.skiplock.enqueue('bad', {}, { queue: 'txn' });
    const result = await drain(t.skiplock, {
      txn: { transactional: true, handle: inserting() },
      bad: {
        transactional: true,
        handle: inserting(() => {
          throw new Error('no');
        }),
      },
    });
    expect({ succeeded: result.succeeded, failed: result.failed }).toEqual({ succeeded: 1, failed: 1 });
    expect(await effectRows(ok.id)).toBe(1);
    expect(await effectRows(bad.id)).toBe(0);
    expect(await t.jobCount('id = $1', [ok.id])).toBe(0);
    expect(await t.row(bad.id)).toMatchObject({ status: 'queued', attempts: 1 });
    expect((await t.row(bad.id))!.last_error).toMatch(/^Error: no\n/);
  });
});

describe('a transactional handler without a connection', () => {
  it('waits, uncharged, and reports an error, until a connection comes; then its job runs once', async () => {
    const role = {
      name: `skiplock_txlimit_${randomBytes(4).toString('hex')}`,
      password: randomBytes(8).toString('hex'),
    };
    const quoted = quoteIdent(role.name);
    const schema = quoteIdent(t.schema);
    await onServer(`CREATE ROLE ${quoted} LOGIN PASSWORD '${role.password}'`);
    const url = new URL(t.url);
    url.username = role.name;
    url.password = role.password;
    const remote = new Skiplock({ connectionString: url.toString(), schema: t.schema });
    try {
      await t.query(`GRANT USAGE ON SCHEMA ${schema} TO ${quoted}`);
      await t.query(`GRANT ALL ON ALL TABLES IN SCHEMA ${schema} TO ${quoted}`);
      await t.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA ${schema} TO ${quoted}`);
      await t.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${schema} TO ${quoted}`);
      const ran: string[] = [];
      const holding = gate();
      const release = gate();
      const errors: SkiplockError[] = [];
      const worker = remote.worker({
        handleSignals: false,
        queues: ['no-connection'],
        concurrency: 2,
        pollIntervalMs: 200,
        handlers: {
          txn: {
            transactional: true,
            handle: async (job) => {
              ran.push(`${(job.payload as { name: string }).name}:${job.attempts}`);
              if ((job.payload as { name: string }).name === 'holder') {
                holding.open();
                await release.opened;
              }
            },
          },
        },
      });
      worker.on('error', (error, source) => {
        if (source === 'transaction') errors.push(error);
      });
      await worker.start();
      const options = { queue: 'no-connection', maxAttempts: 1 };
      // A first job opens the transactional pool's first connection; the holder then keeps it.
      const warm = await t.skiplock.enqueue('txn', { name: 'warm' }, options);
      await waitFor(async () => (await t.row(warm.id)) === undefined, 20_000, 'the first job to finish');
      await t.skiplock.enqueue('txn', { name: 'holder' }, options);
      await holding.opened;
      // The role may open no more connections: the next job's transaction cannot start.
      const [open] = await t.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1',
        [role.name],
      );
      await onServer(`ALTER ROLE ${quoted} CONNECTION LIMIT ${Number(open!.n)}`);
      const waiting = await t.skiplock.enqueue('txn', { name: 'waiting' }, options);
      await waitFor(() => errors.length >= 2, 20_000, 'two refused connections reported');
      expect(errors[0]!.message).toMatch(/SQLSTATE 53300/);
      // It holds its slot and lease; its one attempt is not charged again, and it is not dead.
      expect(ran).toEqual(['warm:1', 'holder:1']);
      expect(await t.row(waiting.id)).toMatchObject({ status: 'running', attempts: 1 });
      await onServer(`ALTER ROLE ${quoted} CONNECTION LIMIT -1`);
      await waitFor(() => ran.length === 3, 20_000, 'the waiting job to run');
      release.open();
      await waitFor(
        async () => (await t.jobCount(`queue = 'no-connection'`)) === 0,
        20_000,
        'every job to finish',
      );
      expect(ran).toEqual(['warm:1', 'holder:1', 'waiting:1']);
      await worker.stop();
    } finally {
      await remote.close();
      await t.query(`DROP OWNED BY ${quoted}`);
      await onServer(`DROP ROLE ${quoted}`);
    }
  });
});
