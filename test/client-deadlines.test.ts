/**
 * Against a server that accepts TCP and never answers, the library's own pool,
 * the dashboard and the command line fail within their documented deadlines
 * with a typed error, instead of hanging.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/dashboard/index.js';
import { run } from '../src/db/executor.js';
import { DatabaseError, Skiplock, ValidationError } from '../src/index.js';
import { workerPool } from '../src/worker/worker-pool.js';
import { runCli } from './cli/cli-process.js';
import { waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';
import { type SilentServer, startSilentServer } from './support/silent-server.js';

const t = useTestDatabase();
let silent: SilentServer;
let mute: SilentServer;

beforeAll(async () => {
  silent = await startSilentServer('silent');
  mute = await startSilentServer('after-startup');
});
afterAll(async () => {
  await silent?.close();
  await mute?.close();
});

/** How long `call` took to reject, and with what. */
async function failure(call: () => Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = Date.now();
  const error = await call().then(
    () => new Error('resolved'),
    (e: unknown) => e,
  );
  return { error, ms: Date.now() - started };
}

describe("a worker's statement past its deadline", () => {
  it('a claim held up past statementTimeoutMs is cancelled by the server: its jobs stay queued, then run on their first attempt', async () => {
    const worker = t.worker({
      queues: ['held-up'],
      // The server's deadline comes a tenth earlier (400 ms here), so its cancel reaches the worker
      // before the worker's own deadline however loaded the machine (at 300 ms, 30 ms was not enough).
      statementTimeoutMs: 4000,
      pollIntervalMs: 200,
      // Jobs a claim leased to nobody would wait this long for the sweeper.
      visibilityTimeoutMs: 120_000,
      onSuccess: 'keep',
      handlers: { k: () => {} },
    });
    const errors: string[] = [];
    worker.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    await worker.start();
    const locker = new pg.Client({ connectionString: t.url });
    await locker.connect();
    t.defer(() => locker.end());
    await locker.query('BEGIN');
    const inserted = await locker.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, queue) SELECT 'k', 'held-up' FROM generate_series(1, 5) RETURNING id::text`,
    );
    // Blocks the claim's update (not its read) until the COMMIT, past the deadline.
    await locker.query(`LOCK TABLE ${t.jobs} IN SHARE MODE`);
    await waitFor(() => errors.some((e) => e.startsWith('claim: ')), 10_000, 'a claim to time out');
    await locker.query('COMMIT');
    const ids = inserted.rows.map((r) => r.id);
    await waitFor(
      async () => (await t.jobCount(`id = ANY($1::bigint[]) AND status = 'succeeded'`, [ids])) === 5,
      15_000,
      'the five jobs to succeed',
    );
    expect(await t.jobCount(`id = ANY($1::bigint[]) AND attempts = 1`, [ids])).toBe(5);
    expect(errors[0]).toBe('claim: canceling statement due to statement timeout (SQLSTATE 57014)');
  });
});

/** Runs `fn` on a worker pool of `url` whose statements have a `deadlineMs` deadline; the pool is closed after. */
async function onWorkerPool(
  url: string,
  deadlineMs: number,
  sessionSettings: boolean,
  fn: (pool: pg.Pool) => Promise<void>,
): Promise<void> {
  const { pool, close } = workerPool({ connectionString: url }, deadlineMs, sessionSettings);
  try {
    await fn(pool);
  } finally {
    await close(2_000);
  }
}

describe("a worker's client-side deadline", () => {
  it('fails a statement the server never answers within statementTimeoutMs, and drops its connection', () =>
    onWorkerPool(mute.url, 500, false, async (pool) => {
      const { error, ms } = await failure(() => run(pool, { name: 'one', text: 'SELECT 1' }, []));
      expect(error).toBeInstanceOf(DatabaseError);
      expect((error as DatabaseError).message).toBe(
        'Query read timeout: no answer within the statement deadline (statementTimeoutMs)',
      );
      expect(ms).toBeGreaterThanOrEqual(450);
      expect(ms).toBeLessThan(5_000);
      await waitFor(() => pool.totalCount === 0, 5_000, 'the connection dropped');
    }));

  it("bounds the session's first statement too, the one that sets its server-side deadline", () =>
    onWorkerPool(mute.url, 500, true, async (pool) => {
      const { error, ms } = await failure(() => run(pool, { name: 'one', text: 'SELECT 1' }, []));
      expect(error).toBeInstanceOf(DatabaseError);
      // Why, not that the connection is broken.
      expect((error as Error).message).toMatch(/^Query read timeout/);
      expect(ms).toBeLessThan(5_000);
    }));

  it('times a statement from when it was sent: one queued behind it on the same connection does not extend it', () =>
    onWorkerPool(t.url, 1_000, false, async (pool) => {
      const client = await pool.connect();
      const started = Date.now();
      const slow = client.query('SELECT pg_sleep(3)').then(
        () => 'answered',
        (e: Error) => `${e.message} after ${Date.now() - started} ms`,
      );
      // Queued late in the first statement's time: a clock restarted by it would run to about 1.9 s.
      await new Promise((resolve) => setTimeout(resolve, 900));
      const queued = client.query('SELECT 1').catch((e: Error) => e.message);
      const outcome = await slow;
      expect(outcome).toMatch(/^Query read timeout after \d+ ms$/);
      expect(Number(outcome.match(/(\d+) ms/)![1])).toBeLessThan(1_600);
      expect(await queued).toBe('Query read timeout');
      client.release(true);
    }));

  it('is per statement: a transaction of statements each under it, longer in all, commits', () =>
    onWorkerPool(t.url, 1_000, false, async (pool) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        for (let i = 0; i < 3; i++) await client.query('SELECT pg_sleep(0.6)');
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    }));
});

describe("a worker session's server-side deadline", () => {
  it('is a little under statementTimeoutMs, unless the role or database has a lower statement_timeout', async () => {
    const show = async (statementTimeoutMs: number, options?: string) => {
      const { pool, close } = workerPool(
        { connectionString: t.url, ...(options ? { options } : {}) },
        statementTimeoutMs,
      );
      try {
        return (await pool.query<{ statement_timeout: string }>('SHOW statement_timeout')).rows[0]
          ?.statement_timeout;
      } finally {
        await close(5_000);
      }
    };
    expect(await show(30_000)).toBe('29s');
    expect(await show(300)).toBe('270ms');
    // As if set for the role or database (the startup options stand in for them here).
    expect(await show(30_000, '-c statement_timeout=2000')).toBe('2s');
    expect(await show(1_000, '-c statement_timeout=60000')).toBe('900ms');
  });
});

describe("the library's own pool", () => {
  it('fails enqueue with a DatabaseError within connectTimeoutMs when the server never answers the handshake', async () => {
    const skiplock = new Skiplock({ connectionString: silent.url, connectTimeoutMs: 500 });
    try {
      const { error, ms } = await failure(() => skiplock.enqueue('k', {}));
      expect(error).toBeInstanceOf(DatabaseError);
      expect((error as DatabaseError).message).toMatch(/timeout/);
      expect(ms).toBeGreaterThanOrEqual(450);
      expect(ms).toBeLessThan(10_000);
    } finally {
      await skiplock.close();
    }
  });

  it('fails with the default 10 s connect deadline too, a worker’s start() included', async () => {
    const skiplock = new Skiplock({ connectionString: silent.url });
    try {
      const worker = skiplock.worker({ handleSignals: false, handlers: { k: async () => {} } });
      for (const call of [() => skiplock.stats(), () => worker.start()]) {
        const { error, ms } = await failure(call);
        expect(error).toBeInstanceOf(DatabaseError);
        expect(ms).toBeGreaterThanOrEqual(9_500);
        expect(ms).toBeLessThan(25_000);
      }
    } finally {
      await skiplock.close();
    }
  }, 90_000);

  it('fails a statement with a DatabaseError within statementTimeoutMs when the server stops answering', async () => {
    const skiplock = new Skiplock({ connectionString: mute.url, statementTimeoutMs: 500 });
    try {
      const { error, ms } = await failure(() => skiplock.enqueue('k', {}));
      expect(error).toBeInstanceOf(DatabaseError);
      expect((error as DatabaseError).message).toBe(
        'Query read timeout: no answer within the statement deadline (statementTimeoutMs)',
      );
      expect(ms).toBeGreaterThanOrEqual(450);
      expect(ms).toBeLessThan(10_000);
    } finally {
      await skiplock.close();
    }
  });

  it('closes within a few seconds on a network that went silent: no socket is left open to hold the process', async () => {
    const deaf = await startSilentServer('after-startup', { ignoreClose: true });
    t.defer(() => deaf.close());
    const skiplock = new Skiplock({ connectionString: deaf.url, statementTimeoutMs: 500 });
    const client = await skiplock.pool.connect();
    const socket = (client as unknown as { connection: { stream: import('node:net').Socket } }).connection
      .stream;
    client.release();
    await skiplock.close();
    await waitFor(() => socket.destroyed, 5_000, 'the idle connection dropped');
  });

  it('leaves a pool of the caller alone: the deadlines are refused with it, naming the option', () => {
    for (const option of ['connectTimeoutMs', 'statementTimeoutMs'] as const) {
      let error: unknown;
      try {
        new Skiplock({ pool: t.db.pool, [option]: 1000 });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(option);
    }
  });

  it('still runs migrate and every call on a server that answers', async () => {
    const skiplock = new Skiplock({ connectionString: t.db.url, schema: t.schema, statementTimeoutMs: 5000 });
    try {
      expect((await skiplock.migrate()).applied).toEqual([]);
      expect((await skiplock.enqueue('k', { a: 1 })).payload).toEqual({ a: 1 });
    } finally {
      await skiplock.close();
    }
  });
});

describe('the dashboard', () => {
  it('answers 500 within the deadline when the database never answers', async () => {
    const skiplock = new Skiplock({
      connectionString: mute.url,
      connectTimeoutMs: 500,
      statementTimeoutMs: 500,
    });
    try {
      const app = createDashboard(skiplock, { metrics: false });
      const started = Date.now();
      const response = await app.fetch(new Request('http://127.0.0.1/'));
      expect(response.status).toBe(500);
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await skiplock.close();
    }
  });
});

describe('the command line', () => {
  it('ends `skiplock stats` and `skiplock enqueue` with exit 1 and one error line within the connect deadline', async () => {
    const [stats, enqueue] = await Promise.all([
      runCli(['stats', '--database-url', silent.url], { timeoutMs: 40_000 }),
      runCli(['enqueue', 'k', '--database-url', mute.url], { timeoutMs: 60_000 }),
    ]);
    expect(stats.code, stats.stderr).toBe(1);
    // pg words it after whichever of its two connect timers fired first.
    expect(stats.stderr).toMatch(
      /^skiplock: error: (timeout exceeded when trying to connect|Connection terminated due to connection timeout)$/m,
    );
    expect(enqueue.code, enqueue.stderr).toBe(1);
    expect(enqueue.stderr).toMatch(
      /^skiplock: error: Query read timeout: no answer within the statement deadline \(statementTimeoutMs\)$/m,
    );
  }, 90_000);
});
