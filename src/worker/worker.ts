/**
 * The worker's life cycle (SPEC §5): start, claim through the fetcher, run
 * handlers in up to `concurrency` slots, write results through the completer,
 * keep leases alive with the heartbeat, sweep dead leases, and stop gracefully.
 */

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { translateError } from '../db/executor.js';
import { type JobQueries, leaseKey } from '../db/queries/jobs.js';
import {
  isPermanentError,
  JobTimeoutError,
  LeaseLostError,
  SchemaVersionError,
  ShutdownError,
  SkiplockError,
  UnknownKindError,
} from '../errors.js';
import { describeFailure } from '../job/failure.js';
import { type Job, type JobRecord, toJob } from '../job/job.js';
import { sweep } from '../maintenance/sweeper.js';
import { assertMigrated } from '../migrations/migrator.js';
import { Completer, type Result } from './completer.js';
import type { WorkerErrorSource, WorkerEvents } from './events.js';
import { Fetcher } from './fetcher.js';
import { Heartbeat } from './heartbeat.js';
import { loopBackoffMs } from './loop-backoff.js';
import { Notifier } from './notifier.js';
import type { Handler, ResolvedWorkerOptions } from './options.js';
import { forgetOnSignals, stopOnSignals } from './signals.js';

/** One claimed job being run, with what its lease is fenced by. */
interface Execution {
  /** {@link leaseKey}: the same worker may claim a job again while a reclaimed lease of it still runs. */
  key: string;
  id: string;
  attempts: number;
  leaseSeq: string;
  job: Job;
  controller: AbortController;
  startedAt: number;
  /** Given back on shutdown: its result must not be written. */
  released: boolean;
  /** Reclaimed by the sweeper: its result would be fenced out anyway. */
  leaseLost: boolean;
}

/** What a worker needs from its Skiplock. */
export interface WorkerContext {
  clientConfig: pg.ClientConfig;
  queries: JobQueries;
  schema: string;
  onStop(worker: Worker): void;
}

/**
 * A worker: claims jobs of its queues and runs their handlers. Made by
 * `skiplock.worker(options)`; call {@link Worker.start} to begin.
 *
 * Events (see {@link WorkerEvents}) report every state change; background
 * errors are emitted as `error` and retried, never thrown.
 */
export class Worker extends EventEmitter<WorkerEvents> {
  /** The id recorded in `locked_by` of the jobs this worker claims. */
  readonly id: string;
  readonly #ctx: WorkerContext;
  readonly #options: ResolvedWorkerOptions;
  readonly #handlers: Record<string, Handler<string, unknown>>;
  readonly #active = new Map<string, Execution>();
  readonly #fetcher: Fetcher;
  readonly #completer: Completer<Execution>;
  readonly #heartbeat: Heartbeat<Execution>;
  readonly #notifier: Notifier;
  /** The worker's own connections (see {@link workerPool}); ended when it stops. */
  readonly #pool: pg.Pool;
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<void> | undefined;
  #state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped' = 'new';
  #startPromise: Promise<void> | undefined;
  #stopPromise: Promise<void> | undefined;
  #idleWaiters: (() => void)[] = [];

  constructor(
    ctx: WorkerContext,
    options: ResolvedWorkerOptions,
    handlers: Record<string, Handler<string, unknown>>,
  ) {
    super();
    this.#ctx = ctx;
    this.#options = options;
    this.#handlers = { ...handlers };
    this.id = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    const { queries } = ctx;
    const pool = workerPool(ctx.clientConfig);
    this.#pool = pool;
    this.#fetcher = new Fetcher({
      batchSize: options.batchSize,
      pollIntervalMs: options.pollIntervalMs,
      freeSlots: () => (this.#state === 'running' ? options.concurrency - this.#active.size : 0),
      claim: (limit) => queries.claim(pool, options.queues, limit, this.id, options.visibilityTimeoutMs),
      dispatch: (jobs) => this.#dispatch(jobs),
      onError: (error) => this.#reportError(error, 'claim'),
    });
    this.#completer = new Completer<Execution>({
      complete: (jobs) => queries.complete(pool, jobs, this.id, options.onSuccess),
      fail: (results) =>
        queries.fail(
          pool,
          results.map((r) => ({
            id: r.job.id,
            attempts: r.job.attempts,
            leaseSeq: r.job.leaseSeq,
            error: r.error,
            permanent: r.permanent,
          })),
          this.id,
        ),
      onWritten: (result, outcome) => {
        if (result.ok) {
          this.emit('job:success', result.job.job, { durationMs: Date.now() - result.job.startedAt });
        } else {
          const info = { status: outcome!.status, retryDelayMs: outcome!.retryDelayMs };
          if (outcome!.status === 'queued') this.#fetcher.wakeAfter(outcome!.retryDelayMs);
          this.emit('job:failure', result.job.job, result.error, info);
        }
      },
      onStale: (execution) => this.emit('job:stale', execution.job),
      onError: (error) => this.#reportError(error, 'complete'),
    });
    this.#heartbeat = new Heartbeat<Execution>({
      intervalMs: options.heartbeatIntervalMs,
      leased: () => [...this.#active.values()].filter((e) => !e.released && !e.leaseLost),
      beat: (jobs) => queries.heartbeat(pool, jobs, this.id),
      onLost: (execution) => {
        // Finished while the heartbeat was in flight: its result, not a reclaim, ended the lease.
        if (this.#active.get(execution.key) !== execution || execution.released) return;
        execution.leaseLost = true;
        execution.controller.abort(new LeaseLostError(execution.id));
        this.emit('lease:lost', execution.job);
      },
      onError: (error) => this.#reportError(error, 'heartbeat'),
    });
    this.#notifier = new Notifier(ctx.clientConfig, queries.channel, {
      onNotification: ({ queue, delayMs }) => {
        if (queue === null || options.queues.includes(queue)) this.#fetcher.wakeAfter(delayMs);
      },
      onListening: () => {
        this.emit('listen');
        this.#fetcher.wake();
      },
      onError: (error) => this.#reportError(error, 'notifier'),
    });
  }

  /** Resolved options, defaults filled in. */
  get options(): Readonly<ResolvedWorkerOptions> {
    return this.#options;
  }

  /** Number of handlers running now. */
  get activeCount(): number {
    return this.#active.size;
  }

  /**
   * Starts listening, claiming and sweeping. Resolves once the LISTEN connection
   * was tried (the worker keeps retrying in the background if it failed).
   *
   * @throws {SchemaVersionError} when the schema was not migrated (run `migrate()` first).
   * @throws {SkiplockError} (code `CLOSED`) when called twice or after stop.
   */
  start(): Promise<void> {
    if (this.#state !== 'new') {
      return Promise.reject(new SkiplockError('CLOSED', 'a worker starts once; make a new one'));
    }
    this.#state = 'starting';
    this.#startPromise = this.#start();
    return this.#startPromise;
  }

  async #start(): Promise<void> {
    try {
      await assertMigrated(this.#pool, this.#ctx.schema);
    } catch (error) {
      if (error instanceof SchemaVersionError) {
        this.#state = 'stopped';
        this.#ctx.onStop(this);
        await this.#pool.end();
        throw error;
      }
      // The database is away: start anyway; the loops retry until it is back.
      this.#reportError(translateError(error), 'claim');
    }
    this.#state = 'running';
    if (this.#options.handleSignals) stopOnSignals(this);
    this.#heartbeat.start();
    await this.#notifier.start();
    this.#fetcher.start();
    this.#runSweep();
    this.#sweepTimer = setInterval(() => this.#runSweep(), this.#options.sweepIntervalMs);
    this.#sweepTimer.unref();
  }

  #runSweep(): void {
    this.#sweeping ??= sweep(
      this.#pool,
      this.#ctx.queries,
      this.#ctx.schema,
      this.#options.visibilityTimeoutMs,
    )
      .then((result) => {
        if (result.requeued + result.dead > 0)
          this.emit('sweep', { requeued: result.requeued, dead: result.dead });
      })
      .catch((error) => this.#reportError(translateError(error), 'sweep'))
      .finally(() => {
        this.#sweeping = undefined;
      });
  }

  #dispatch(jobs: JobRecord[]): void {
    this.emit('claim', jobs.length);
    for (const record of jobs) {
      const job = toJob(record);
      const execution: Execution = {
        key: leaseKey(record),
        id: job.id,
        attempts: job.attempts,
        leaseSeq: record.leaseSeq,
        job,
        controller: new AbortController(),
        startedAt: Date.now(),
        released: false,
        leaseLost: false,
      };
      this.#active.set(execution.key, execution);
      if (this.#state !== 'running') {
        // Claimed while stopping: give it back before it starts.
        void this.#release([execution]);
        continue;
      }
      this.emit('job:start', job);
      void this.#execute(execution).then((result) => {
        this.#active.delete(execution.key);
        if (!execution.released && !execution.leaseLost) this.#completer.push(result);
        else if (execution.leaseLost) this.emit('job:stale', execution.job);
        this.#fetcher.slotFreed();
        this.#settled();
      });
    }
  }

  /** Runs one handler to a result; never rejects. */
  async #execute(execution: Execution): Promise<Result<Execution>> {
    const { job, controller } = execution;
    const handler = Object.hasOwn(this.#handlers, job.kind) ? this.#handlers[job.kind] : undefined;
    if (!handler) return failure(execution, new UnknownKindError(job.kind));
    const timeoutMs = this.#options.jobTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    try {
      const run = Promise.resolve().then(() => handler(job, { signal: controller.signal }));
      if (timeoutMs === undefined) {
        await run;
      } else {
        const timedOut = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const error = new JobTimeoutError(timeoutMs);
            controller.abort(error);
            reject(error);
          }, timeoutMs);
        });
        // A handler that ignores its signal keeps running, but its slot is freed.
        run.catch(() => {});
        await Promise.race([run, timedOut]);
      }
      return { job: execution, ok: true };
    } catch (error) {
      return failure(execution, error);
    } finally {
      clearTimeout(timer);
    }
  }

  async #release(executions: Execution[]): Promise<void> {
    for (const e of executions) e.released = true;
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        const released = await this.#ctx.queries.release(this.#pool, executions, this.id);
        for (const e of executions) {
          this.#active.delete(e.key);
          if (released.has(e.key)) this.emit('job:released', e.job);
        }
        this.#settled();
        return;
      } catch (error) {
        this.#reportError(translateError(error), 'release');
        await sleep(loopBackoffMs(attempt));
      }
    }
    // Could not reach the database: the sweeper gives these jobs back after the visibility timeout.
    for (const e of executions) this.#active.delete(e.key);
    this.#settled();
  }

  /**
   * Stops gracefully (SPEC §5): stops claiming, lets running handlers finish for
   * up to `shutdownTimeoutMs`, then aborts the rest through their signal and
   * gives their jobs back to `queued` without charging the attempt. Resolves
   * when results are written and connections closed. Idempotent.
   */
  stop(): Promise<void> {
    // A stop during start waits for the start to finish, then undoes it.
    this.#stopPromise ??= (this.#startPromise ?? Promise.resolve()).catch(() => {}).then(() => this.#stop());
    return this.#stopPromise;
  }

  async #stop(): Promise<void> {
    const before = this.#state;
    this.#state = 'stopping';
    if (before !== 'running') {
      // Never started, or its start failed (and ended the pool already).
      if (before !== 'stopped') await this.#pool.end();
      this.#state = 'stopped';
      forgetOnSignals(this);
      return;
    }
    clearInterval(this.#sweepTimer);
    await this.#fetcher.stop();
    await this.#whenIdle(this.#options.shutdownTimeoutMs);
    const unfinished = [...this.#active.values()].filter((e) => !e.released);
    for (const e of unfinished) e.controller.abort(new ShutdownError());
    if (unfinished.length > 0) await this.#release(unfinished);
    await this.#completer.drain(Math.max(this.#options.shutdownTimeoutMs, 5_000));
    await this.#heartbeat.stop();
    await this.#sweeping;
    await this.#notifier.stop();
    await this.#pool.end();
    this.#state = 'stopped';
    forgetOnSignals(this);
    this.#ctx.onStop(this);
    this.emit('stop');
  }

  /** Resolves when no handler runs, or after `timeoutMs`. */
  async #whenIdle(timeoutMs: number): Promise<void> {
    if (this.#active.size === 0) return;
    const timeout = new AbortController();
    await Promise.race([
      new Promise<void>((resolve) => {
        this.#idleWaiters.push(resolve);
      }),
      sleep(timeoutMs, undefined, { signal: timeout.signal }).catch(() => {}),
    ]);
    timeout.abort();
  }

  #settled(): void {
    if (this.#active.size > 0) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  #reportError(error: SkiplockError, source: WorkerErrorSource): void {
    if (this.listenerCount('error') > 0) this.emit('error', error, source);
    else console.error(`[skiplock] worker ${this.id}: ${source} error: ${error.message}`);
  }
}

/** Most connections a worker's own pool opens: claim, results, heartbeat, sweep, release. */
const WORKER_POOL_SIZE = 6;

/**
 * The worker's own pool. Its sessions commit asynchronously
 * (`synchronous_commit = off`): a claim, result, heartbeat or release lost in a
 * server crash leaves the job queued or running-then-reclaimed, so it runs
 * again — at-least-once holds, and each statement skips a WAL flush. Producers'
 * inserts never run here. Its sessions also cannot idle in a transaction for
 * long (`idle_in_transaction_session_timeout`, SPEC §6).
 */
function workerPool(config: pg.ClientConfig): pg.Pool {
  const options = [
    config.options,
    '-c synchronous_commit=off',
    '-c idle_in_transaction_session_timeout=60000',
  ]
    .filter(Boolean)
    .join(' ');
  const pool = new pg.Pool({ ...config, options, max: WORKER_POOL_SIZE });
  // An idle connection that dies (server restart, terminated backend) is replaced; the loops report the rest.
  pool.on('error', () => {});
  return pool;
}

function failure(execution: Execution, error: unknown): Result<Execution> {
  return {
    job: execution,
    ok: false,
    error: describeFailure(error),
    permanent: isPermanentError(error),
  };
}
