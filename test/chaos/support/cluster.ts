/**
 * The parent side of the chaos scenarios: real worker processes (forked with
 * `node --import tsx`), the effect tables their handlers write, and the checks
 * every scenario ends with.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { beforeEach, expect } from 'vitest';
import { countRows, waitFor } from '../../support/database.js';
import { type TestContext, useTestDatabase } from '../../support/fixture.js';
import { tableIn } from '../../support/sql.js';
import type { ChildMessage, ParentMessage, WorkerProcessConfig } from './protocol.js';

const SCRIPT = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

let appCounter = 0;

/** Where a scenario runs: a database and the schema of its jobs and effect tables. */
export interface Target {
  url: string;
  schema: string;
}

/** Who shuts a scenario's processes down after it (the test fixture's `defer`). */
export interface Owner {
  defer(cleanup: () => unknown): void;
}

/**
 * Defaults for a chaos worker: leases short enough that reclaim is quick, and
 * long enough (ten heartbeats) that a loaded machine does not lose live ones.
 */
export function workerConfig(
  target: Target,
  overrides: Partial<WorkerProcessConfig> = {},
): WorkerProcessConfig {
  appCounter++;
  return {
    url: target.url,
    schema: target.schema,
    appName: `chaos-${process.pid}-${appCounter}`,
    queues: ['default'],
    concurrency: 8,
    pollIntervalMs: 500,
    visibilityTimeoutMs: 3000,
    sweepIntervalMs: 250,
    shutdownTimeoutMs: 5000,
    onSuccess: 'keep',
    handleSignals: true,
    ...overrides,
  };
}

/** Where a worker process runs. */
export interface SpawnOptions {
  /** A network namespace (`ip netns`) to run it in, as a host of its own; the test's by default. */
  netns?: string;
}

/** One worker process and everything it reported. */
export class WorkerProcess {
  readonly config: WorkerProcessConfig;
  readonly child: ChildProcess;
  readonly messages: ChildMessage[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  workerId: string | undefined;
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  #shuttingDown = false;
  readonly #listeners = new Set<(message: ChildMessage) => void>();

  constructor(config: WorkerProcessConfig, options: SpawnOptions = {}) {
    this.config = config;
    const node = ['--import', 'tsx'];
    this.child = fork(SCRIPT, [], {
      // In a network namespace, `ip netns exec` runs node there (it execs: the pid and IPC channel stay).
      ...(options.netns
        ? { execPath: 'ip', execArgv: ['netns', 'exec', options.netns, process.execPath, ...node] }
        : { execArgv: node }),
      env: { ...process.env, CHAOS_CONFIG: JSON.stringify(config) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.child.on('message', (message: ChildMessage) => {
      if (message.type === 'ready') this.workerId = message.workerId;
      this.messages.push(message);
      for (const listener of this.#listeners) listener(message);
    });
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.#exit = { code, signal };
        resolve(this.#exit);
      });
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.#exit === undefined;
  }

  get exit(): { code: number | null; signal: NodeJS.Signals | null } | undefined {
    return this.#exit;
  }

  /** Messages of one type reported so far. */
  reported<T extends ChildMessage['type']>(type: T): Extract<ChildMessage, { type: T }>[] {
    return this.messages.filter((m): m is Extract<ChildMessage, { type: T }> => m.type === type);
  }

  /** Resolves with the first message (from now or already reported) that matches. */
  next<T extends ChildMessage['type']>(
    type: T,
    match: (m: Extract<ChildMessage, { type: T }>) => boolean = () => true,
    timeoutMs = 20_000,
    since = 0,
  ): Promise<Extract<ChildMessage, { type: T }>> {
    const found = this.messages
      .slice(since)
      .find((m): m is Extract<ChildMessage, { type: T }> => m.type === type && match(m as never));
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#listeners.delete(listener);
        reject(new Error(`worker ${this.pid}: no '${type}' message within ${timeoutMs} ms`));
      }, timeoutMs);
      const listener = (m: ChildMessage) => {
        if (m.type === type && match(m as never)) {
          clearTimeout(timer);
          this.#listeners.delete(listener);
          resolve(m as Extract<ChildMessage, { type: T }>);
        }
      };
      this.#listeners.add(listener);
      void this.exited.then(() => {
        if (!this.#listeners.has(listener)) return;
        clearTimeout(timer);
        this.#listeners.delete(listener);
        reject(new Error(`worker ${this.pid} exited (${JSON.stringify(this.#exit)}) before '${type}'`));
      });
    });
  }

  /** Waits until the worker started (it is listening and claiming). */
  async ready(timeoutMs = 30_000): Promise<this> {
    await this.next('ready', () => true, timeoutMs);
    return this;
  }

  send(message: ParentMessage): void {
    if (this.alive && this.child.connected) this.child.send(message);
  }

  /** From now on, every blocked handler of this process is told to finish successfully. */
  autoFinish(): this {
    for (const m of this.reported('started')) this.send({ type: 'finish', id: m.id, outcome: 'ok' });
    this.#listeners.add((m) => {
      if (m.type === 'started') this.send({ type: 'finish', id: m.id, outcome: 'ok' });
    });
    return this;
  }

  kill(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  /** Errors the worker reported through its `error` event. */
  get errors(): Extract<ChildMessage, { type: 'error' }>[] {
    return this.reported('error');
  }

  /** Whether `shutdown()` was called: an orchestrator does not replace such a process. */
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** Ends the process: SIGTERM (graceful), then SIGKILL if it is still there after `graceMs`. */
  async shutdown(graceMs = 10_000): Promise<void> {
    this.#shuttingDown = true;
    if (!this.alive) return;
    this.kill('SIGCONT');
    this.kill('SIGTERM');
    const timer = setTimeout(() => this.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Forks a worker process that `owner` shuts down after the test (SIGTERM, then SIGKILL). */
export function spawnWorker(
  owner: Owner,
  config: WorkerProcessConfig,
  options: SpawnOptions = {},
): WorkerProcess {
  const p = new WorkerProcess(config, options);
  owner.defer(() => p.shutdown(2000));
  return p;
}

/** Starts a worker process (shut down after the test) and waits until it runs. */
export async function startWorker(
  owner: Owner,
  config: WorkerProcessConfig,
  options: SpawnOptions = {},
): Promise<WorkerProcess> {
  return spawnWorker(owner, config, options).ready();
}

/** The effect tables of a scenario, next to its jobs (job ids start again in each schema). */
export function effectTables(schema: string) {
  return { effects: tableIn(schema, 'chaos_effects'), deliveries: tableIn(schema, 'chaos_deliveries') };
}

/**
 * The test fixture with the scenario helpers bound to the test's database and
 * schema, which nearly every scenario would otherwise pass each time.
 */
export interface ChaosContext extends TestContext {
  /** Starts a worker process on the test's schema ({@link workerConfig} with `overrides`) and waits until it runs. */
  startWorker(overrides?: Partial<WorkerProcessConfig>): Promise<WorkerProcess>;
  /** Forks a worker process on the test's schema ({@link workerConfig} with `overrides`) without waiting. */
  spawnWorker(overrides?: Partial<WorkerProcessConfig>): WorkerProcess;
  /** {@link waitUntilSettled} for the test's jobs `ids`. */
  settle(ids: string[], timeoutMs: number, what?: string): Promise<void>;
  /** {@link tally} of the test's jobs `ids`. */
  tally(ids: string[]): Promise<Tally>;
  /** {@link attemptsOf} the test's jobs `ids`. */
  attempts(ids: string[]): Promise<{ max: number; reclaimed: number }>;
  /** Deliveries so far (the test's schema holds only its own jobs). */
  deliveries(): Promise<number>;
}

/** The test fixture (a schema per test), with the effect tables made in each test's schema. */
export function useChaosDatabase(): ChaosContext {
  const t = useTestDatabase();
  beforeEach(async () => {
    await createEffectTables(t.db.pool, t.schema);
  });
  // Added to the fixture itself: its fields are getters that only answer inside a test.
  return Object.assign(t, {
    startWorker: (overrides: Partial<WorkerProcessConfig> = {}) => startWorker(t, workerConfig(t, overrides)),
    spawnWorker: (overrides: Partial<WorkerProcessConfig> = {}) => spawnWorker(t, workerConfig(t, overrides)),
    settle: (ids: string[], timeoutMs: number, what?: string) =>
      waitUntilSettled(t.db.pool, t.schema, ids, timeoutMs, what),
    tally: (ids: string[]) => tally(t.db.pool, t.schema, ids),
    attempts: (ids: string[]) => attemptsOf(t.db.pool, t.schema, ids),
    deliveries: () => countRows(t.db.pool, effectTables(t.schema).deliveries),
  });
}

/**
 * The tables the handlers write their effect to: one row per job, and one per
 * delivery (`at`: when the row was written, database clock; `started_at`: when
 * the sleeping handler started, the worker process's clock, the same machine's).
 */
export async function createEffectTables(db: Pick<pg.Pool, 'query'>, schema: string): Promise<void> {
  const { effects, deliveries } = effectTables(schema);
  await db.query(`
    CREATE TABLE IF NOT EXISTS ${effects} (job_id bigint PRIMARY KEY, deliveries int NOT NULL);
    CREATE TABLE IF NOT EXISTS ${deliveries} (
      job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      started_at timestamptz
    );
  `);
}

/** What the effect tables and the jobs table say at the end of a scenario. */
export interface Tally {
  jobs: number;
  /** Jobs with exactly one effect row (the idempotent effect). */
  effects: number;
  /** Deliveries beyond the first, summed over jobs (at-least-once re-runs). */
  duplicates: number;
  /** Jobs without an effect. */
  lost: number;
  /** Two deliveries of the same attempt of the same job: the claim was not exactly-once. */
  sameAttemptTwice: number;
  /** Jobs whose final attempt did not deliver (kept jobs only). */
  finalAttemptMissing: number;
  /** Jobs by status (the jobs table). */
  byStatus: Record<string, number>;
}

/** Tallies the jobs `ids` of `schema` against their effects. */
export async function tally(db: Pick<pg.Pool, 'query'>, schema: string, ids: string[]): Promise<Tally> {
  const jobsTable = tableIn(schema, 'jobs');
  const { effects, deliveries } = effectTables(schema);
  const { rows } = await db.query<{
    effects: number;
    duplicates: number;
    lost: number;
    same_attempt_twice: number;
    final_attempt_missing: number;
  }>(
    `WITH ids AS (SELECT unnest($1::bigint[]) AS id)
     SELECT
       (SELECT count(*) FROM ids JOIN ${effects} e ON e.job_id = ids.id)::int AS effects,
       (SELECT COALESCE(sum(e.deliveries - 1), 0) FROM ids JOIN ${effects} e ON e.job_id = ids.id)::int
         AS duplicates,
       (SELECT count(*) FROM ids WHERE NOT EXISTS (SELECT 1 FROM ${effects} e WHERE e.job_id = ids.id))::int
         AS lost,
       (SELECT count(*) FROM (SELECT 1 FROM ${deliveries} d JOIN ids ON d.job_id = ids.id
                              GROUP BY d.job_id, d.attempt HAVING count(*) > 1) x)::int AS same_attempt_twice,
       (SELECT count(*) FROM ${jobsTable} j JOIN ids ON j.id = ids.id
         WHERE j.status = 'succeeded'
           AND NOT EXISTS (SELECT 1 FROM ${deliveries} d WHERE d.job_id = j.id AND d.attempt = j.attempts))::int
         AS final_attempt_missing`,
    [ids],
  );
  const statuses = await db.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${jobsTable} WHERE id = ANY($1::bigint[]) GROUP BY status`,
    [ids],
  );
  const row = rows[0]!;
  return {
    jobs: ids.length,
    effects: row.effects,
    duplicates: row.duplicates,
    lost: row.lost,
    sameAttemptTwice: row.same_attempt_twice,
    finalAttemptMissing: row.final_attempt_missing,
    byStatus: Object.fromEntries(statuses.rows.map((r) => [r.status, r.n])),
  };
}

/** The highest attempt number among the jobs `ids` of `schema`, and how many of them were claimed more than once. */
export async function attemptsOf(
  db: Pick<pg.Pool, 'query'>,
  schema: string,
  ids: string[],
): Promise<{ max: number; reclaimed: number }> {
  const { rows } = await db.query<{ max: number; reclaimed: number }>(
    `SELECT max(attempts)::int AS max, count(*) FILTER (WHERE attempts > 1)::int AS reclaimed
     FROM ${tableIn(schema, 'jobs')} WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  return rows[0]!;
}

/**
 * Every job of the tally succeeded with its effect, none was lost, no attempt
 * ran twice, and each one's final attempt is the one that delivered.
 */
export function expectEveryJobDone(counted: Tally): void {
  expect(counted).toMatchObject({
    effects: counted.jobs,
    lost: 0,
    sameAttemptTwice: 0,
    finalAttemptMissing: 0,
    byStatus: { succeeded: counted.jobs },
  });
}

/** Waits until none of `ids` of `schema` is queued or running; on timeout, says how many were left. */
export async function waitUntilSettled(
  db: Pick<pg.Pool, 'query'>,
  schema: string,
  ids: string[],
  timeoutMs: number,
  what = 'every job to finish',
): Promise<void> {
  const byStatus = async () =>
    (
      await db.query<{ status: string; n: number }>(
        `SELECT status, count(*)::int AS n FROM ${tableIn(schema, 'jobs')} WHERE id = ANY($1::bigint[]) GROUP BY 1`,
        [ids],
      )
    ).rows;
  await waitFor(
    async () => (await byStatus()).every((r) => r.status !== 'queued' && r.status !== 'running'),
    timeoutMs,
    what,
    byStatus,
  );
}

/** The figures every scenario reports, first in its line. */
export interface Figure {
  jobs: number;
  kills: number;
  restarts: number;
  effects: number;
  duplicates: number;
  lost: number;
}

/** Prints a scenario's one-line figure: the common figures, then the scenario's own. */
export function figure(scenario: string, values: Figure & Record<string, number | string>): void {
  const text = Object.entries(values)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  console.log(`[chaos] ${scenario}: ${text}`);
}

/**
 * Prints the figure of a scenario whose effects were counted by {@link tally}:
 * its jobs, effects, duplicates and lost, with `values` (kills, restarts, then
 * the scenario's own; a `jobs` there replaces the tally's).
 */
export function tallyFigure(
  scenario: string,
  counted: Tally,
  values: Pick<Figure, 'kills' | 'restarts'> & Partial<Figure> & Record<string, number | string>,
): void {
  const { jobs, effects, duplicates, lost } = counted;
  const { kills, restarts, ...own } = values;
  figure(scenario, { jobs, kills, restarts, effects, duplicates, lost, ...own });
}
