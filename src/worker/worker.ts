/**
 * The worker's life cycle: start, claim through the claim loop into a buffer, run
 * handlers in up to `concurrency` slots, write results through the completer,
 * keep leases alive with the heartbeat, run the maintenance loop, and stop
 * gracefully within a deadline.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type pg from 'pg';
import { translateError } from '../db/executor.js';
import type { ClaimedJob } from '../db/queries/claim.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { LeaseLostError, SchemaVersionError, ShutdownError, SkiplockError } from '../errors.js';
import type { Maintainer } from '../maintenance/maintainer.js';
import { workerMaintenance } from '../maintenance/worker-maintenance.js';
import { assertMigrated } from '../migrations/migrator.js';
import { type Clock, systemClock, type TimerHandle } from '../runtime/clock.js';
import type { JobTracing } from '../telemetry/tracing.js';
import { Cancellation } from './cancellation.js';
import { ClaimLoop, workerClaimRequest } from './claim-loop.js';
import type { Completer } from './completer.js';
import type { WorkerEvents } from './events.js';
import { EventReporter } from './events.js';
import { bufferedExecution, type Execution, Executions } from './executions.js';
import { type RunOutcome, runJob } from './executor.js';
import { kindRetryDelayMs, type ResolvedHandler } from './handler-definition.js';
import { Heartbeat } from './heartbeat.js';
import { type Notifier, workerNotifier } from './notifier.js';
import type { ResolvedWorkerOptions } from './options.js';
import { releaseExecutions } from './release.js';
import { resultWriter } from './result-writer.js';
import { serverWarnings } from './server-check.js';
import { forgetOnSignals, stopOnSignals } from './signals.js';
import { TransactionalAttempts } from './transactional.js';
import { settlesWithin, type WorkerPool, workerPool } from './worker-pool.js';

/** What a worker needs from its Skiplock. */
export interface WorkerContext {
  clientConfig: pg.ClientConfig;
  queries: JobQueries;
  schema: string;
  /** Loads the spans of a Skiplock with tracing on; absent when it is off. */
  tracing?: () => Promise<JobTracing>;
  onStop(worker: Worker): void;
  /** Times the worker's deadlines and loops. @default the process's clock */
  clock?: Clock;
}

/** Fewest buffered jobs worth a release statement when the buffer is trimmed. */
const MIN_TRIM = 10;

/** Time `stop()` may take beyond `shutdownTimeoutMs` to write results and close connections. */
const STOP_GRACE_MS = 3_000;

/** The last part of the grace, kept for closing the listener and the pools. */
const CLOSE_RESERVE_MS = 500;

/**
 * How long a handler that called `stop()` may still take after the other
 * handlers are done, when the shutdown deadline has passed by then (it is
 * never cut short before the deadline).
 */
const STOP_CALLER_GRACE_MS = 1_000;

/**
 * A worker: claims jobs of its queues and kinds and runs their handlers. Made
 * by `skiplock.worker(options)`; call {@link Worker.start} to begin.
 *
 * Events (see {@link WorkerEvents}) report every state change; background
 * errors are emitted as `error` and retried, never thrown.
 */
export class Worker extends EventEmitter<WorkerEvents> {
  /** The id recorded in `locked_by` of the jobs this worker claims. */
  readonly id: string;
  readonly #ctx: WorkerContext;
  readonly #options: ResolvedWorkerOptions;
  readonly #handlers: ReadonlyMap<string, ResolvedHandler>;
  readonly #clock: Clock;
  readonly #executions: Executions;
  readonly #claimLoop: ClaimLoop;
  readonly #completer: Completer<Execution>;
  readonly #cancellation: Cancellation;
  readonly #heartbeat: Heartbeat<Execution>;
  readonly #notifier: Notifier;
  readonly #maintainer: Maintainer;
  readonly #pool: WorkerPool;
  /** Runs transactional handlers on connections of their own (made only when one is declared). */
  readonly #transactional: TransactionalAttempts | undefined;
  #bufferTimer: TimerHandle | undefined;
  readonly #events: EventReporter;
  /** Set by start when tracing is on. */
  #tracing: JobTracing | undefined;
  #state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped' = 'new';
  #startPromise: Promise<void> | undefined;
  #stopPromise: Promise<void> | undefined;
  /** Resolves when stop no longer waits for handlers (what a handler calling stop() gets). */
  readonly #handlersDone: Promise<void>;
  #resolveHandlersDone!: () => void;
  /** Handlers that called stop(): stop does not wait for them before releasing the others. */
  readonly #stopCallers = new Set<Execution>();
  /**
   * The execution whose handler is being called, while the call has not
   * returned: a `stop()` made then comes from that handler. Set around the
   * synchronous call only, so knowing it costs a job nothing (no async context).
   */
  #calling: Execution | undefined;

  constructor(ctx: WorkerContext, options: ResolvedWorkerOptions) {
    super();
    this.#ctx = ctx;
    this.#options = options;
    this.#clock = ctx.clock ?? systemClock;
    this.#executions = new Executions(this.#clock);
    this.#handlersDone = new Promise<void>((resolve) => {
      this.#resolveHandlersDone = resolve;
    });
    this.#handlers = options.handlers;
    this.id = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.#events = new EventReporter(this, this.id);
    const { queries } = ctx;
    this.#pool = workerPool(
      ctx.clientConfig,
      options.statementTimeoutMs,
      options.sessionSettings,
      this.#clock,
    );
    const pool = this.#pool.pool;
    this.#claimLoop = new ClaimLoop(
      {
        pool,
        queries,
        queues: options.queues,
        request: workerClaimRequest(options, this.id, ctx.tracing !== undefined),
        pollIntervalMs: options.pollIntervalMs,
        concurrency: options.concurrency,
        prefetch: options.prefetch,
        batchSize: options.batchSize,
      },
      {
        held: () =>
          this.#state === 'running'
            ? {
                running: this.#executions.runningCount,
                buffered: this.#executions.bufferedCount,
                unwritten: this.#completer.backlog,
              }
            : null,
        dispatch: (jobs, sentAt) => this.#dispatch(jobs, sentAt),
        onLimited: (queue) => {
          const taken = this.#executions.takeBufferedWhere((e) => e.job.queue === queue);
          if (taken.length > 0) void this.#release(taken);
        },
        onError: (error) => this.#events.error(error, 'claim'),
      },
      this.#clock,
    );
    this.#transactional = TransactionalAttempts.forWorker(ctx.clientConfig, options, {
      workerPool: pool,
      queries,
      workerId: this.id,
      events: this.#events,
    });
    this.#completer = resultWriter({
      queries,
      pool,
      workerId: this.id,
      onSuccess: options.onSuccess,
      events: this.#events,
      wakeAfter: (delayMs) => this.#claimLoop.wakeAfter(delayMs),
      onBatchWritten: () => this.#claimLoop.slotFreed(),
    });
    this.#cancellation = new Cancellation(
      {
        executions: this.#executions,
        queues: options.queues,
        giveBack: (taken) => {
          void this.#release(taken, 10_000);
        },
        cancelRequested: (held) => queries.cancel.requested(pool, held, this.id),
        paused: (queues) => queries.queues.paused(pool, queues),
        onChecked: () => this.#pump(),
        onError: (error) => this.#events.error(error, 'claim'),
      },
      this.#clock,
    );
    this.#heartbeat = new Heartbeat<Execution>(
      {
        intervalMs: options.heartbeatIntervalMs,
        leased: () => this.#executions.leased(),
        beat: (jobs) => queries.results.beat(pool, jobs, this.id),
        onLost: (e) => this.#leaseLost(e),
        onCancelRequested: (held) => this.#cancellation.onCancelRequested(held),
        onError: (error) => this.#events.error(error, 'heartbeat'),
      },
      this.#clock,
    );
    this.#notifier = workerNotifier({
      clientConfig: ctx.clientConfig,
      options,
      queries,
      pool,
      claimLoop: this.#claimLoop,
      cancellation: this.#cancellation,
      events: this.#events,
      clock: this.#clock,
    });
    this.#maintainer = workerMaintenance({
      pool,
      queries,
      sweepIntervalMs: options.sweepIntervalMs,
      visibilityTimeoutMs: options.visibilityTimeoutMs,
      schedules: options.schedules,
      onSwept: (result) => this.#events.emit('worker:sweep', result),
      retention: options,
      onPruned: (result) => this.#events.emit('worker:prune', result),
      onArchivePartitions: (result) => this.#events.emit('worker:archive', result),
      onError: (error, service) => this.#events.error(error, service),
      onWarning: (message) => this.#events.warn(message),
    });
  }

  /** Resolved options, defaults filled in. */
  get options(): Readonly<ResolvedWorkerOptions> {
    return this.#options;
  }

  /** Number of handlers running now. */
  get activeCount(): number {
    return this.#executions.runningCount;
  }

  /** Number of jobs claimed ahead and waiting in the buffer. */
  get bufferedCount(): number {
    return this.#executions.bufferedCount;
  }

  /**
   * Starts listening, claiming and maintenance. Checks first that the database
   * answers and its schema is migrated; after a successful start, outages are
   * retried in the background.
   *
   * @throws {DatabaseError} when the database cannot be reached (wrong URL, password, database).
   * @throws {SchemaVersionError} when the schema was not migrated (run `migrate()` first) or is newer.
   * @throws {SkiplockError} (code `ALREADY_STARTED`) when called a second time.
   * @throws {MissingDependencyError} with tracing on, when `@opentelemetry/api` is not installed.
   */
  start(): Promise<void> {
    if (this.#state !== 'new') {
      return Promise.reject(new SkiplockError('ALREADY_STARTED', 'a worker starts once; make a new one'));
    }
    this.#state = 'starting';
    this.#startPromise = this.#start();
    return this.#startPromise;
  }

  async #start(): Promise<void> {
    try {
      await assertMigrated(this.#pool.pool, this.#ctx.schema);
      if (this.#ctx.tracing) this.#tracing = await this.#ctx.tracing();
      await this.#claimLoop.readLimits();
    } catch (error) {
      this.#state = 'stopped';
      this.#ctx.onStop(this);
      await this.#closePools(1_000);
      throw error instanceof SchemaVersionError ? error : translateError(error);
    }
    this.#state = 'running';
    if (this.#options.handleSignals) stopOnSignals(this);
    this.#heartbeat.start();
    if (this.#options.listen) await this.#notifier.start();
    this.#claimLoop.start();
    this.#maintainer.start();
    this.#expireBuffered();
    void this.#warnAboutServer();
  }

  /** Buffers claimed jobs; `sentAt` (when their claim was sent) is their claim time. */
  #dispatch(jobs: ClaimedJob[], sentAt: number): void {
    this.#events.emit('worker:claim', jobs.length);
    const executions = jobs.map((job) => bufferedExecution(job, sentAt));
    if (this.#state !== 'running') {
      // Claimed while stopping: give them back before they start.
      this.#executions.buffer(executions);
      void this.#release(this.#executions.takeBuffered());
      return;
    }
    this.#executions.buffer(executions);
    this.#pump();
  }

  /** Starts buffered jobs while slots are free. */
  #pump(): void {
    const { concurrency, jobTimeoutMs } = this.#options;
    while (
      this.#state === 'running' &&
      this.#stopPromise === undefined &&
      this.#executions.runningCount < concurrency
    ) {
      const now = this.#clock.monotonic();
      const next = this.#executions.peek();
      // A job that waited long in the buffer starts only once its queue is known not to be paused.
      if (!next || !this.#cancellation.mayStart(next, now)) break;
      const e = this.#executions.start(now);
      if (!e) break;
      this.#claimLoop.jobStarted();
      if (this.#events.heard('job:start')) this.#events.emit('job:start', e.job);
      const handler = this.#handlers.get(e.job.kind);
      const timeoutMs = handler?.timeoutMs ?? jobTimeoutMs;
      const attempt = handler?.transactional
        ? () => this.#transactional!.run(e, handler.handle, timeoutMs)
        : () => runJob(handler?.handle, e.job, e.control!, timeoutMs);
      const tracing = this.#tracing;
      this.#calling = e;
      let running: Promise<RunOutcome | null>;
      try {
        running = tracing ? tracing.process(e.job, e.traceContext, attempt) : attempt();
      } finally {
        this.#calling = undefined;
      }
      void running.then((outcome) => this.#settle(e, outcome));
    }
  }

  /** A handler settled; `outcome` null: a transactional attempt settled and reported its result itself. */
  #settle(e: Execution, outcome: RunOutcome | null): void {
    this.#claimLoop.jobFinished(this.#clock.monotonic() - e.startedAt);
    this.#trimBuffer();
    const lost = e.state === 'lost';
    const released = e.state === 'released';
    this.#executions.finish(e);
    if (lost) this.#events.emit('job:stale', e.job);
    else if (!released && outcome !== null) {
      if (outcome.ok) this.#completer.succeeded(e);
      else
        this.#completer.failed({
          job: e,
          thrown: outcome.thrown,
          error: outcome.error,
          permanent: outcome.permanent,
          snoozeDelayMs: outcome.snoozeDelayMs,
          retryDelayMs: kindRetryDelayMs(this.#handlers.get(e.job.kind), e.job, outcome),
        });
    }
    this.#pump();
    this.#claimLoop.slotFreed();
  }

  /**
   * Gives back the newest buffered jobs beyond what the handlers' recent run
   * times would start soon (see ClaimLoop.bufferLimit), so slow jobs that
   * followed fast ones spread over the workers instead of waiting here.
   */
  #trimBuffer(): void {
    const excess = this.#executions.bufferedCount - this.#claimLoop.bufferLimit();
    if (this.#state !== 'running' || excess < Math.max(this.#options.concurrency, MIN_TRIM)) return;
    const taken = this.#executions.takeNewestBuffered(excess);
    if (taken.length > 0) void this.#release(taken);
  }

  #leaseLost(e: Execution): void {
    // Finished while the heartbeat was in flight: its result, not a reclaim, ended the lease.
    if (e.state !== 'running' && e.state !== 'buffered') return;
    const wasRunning = e.state === 'running';
    e.state = 'lost';
    if (wasRunning) e.control?.abort(new LeaseLostError(e.id));
    this.#events.emit('lease:lost', e.job);
  }

  /** Gives back buffered jobs that waited longer than `prefetchTimeoutMs`; checks again every half of it. */
  #expireBuffered(): void {
    if (this.#state !== 'running') return;
    const { prefetchTimeoutMs } = this.#options;
    if (this.#executions.bufferedCount > 0) {
      const expired = this.#executions.takeBuffered(this.#clock.monotonic() - prefetchTimeoutMs);
      if (expired.length > 0) void this.#release(expired);
    }
    this.#bufferTimer = this.#clock.setTimeout(
      () => this.#expireBuffered(),
      Math.max(10, prefetchTimeoutMs / 2),
    );
  }

  /** Gives held jobs back; each is reported `job:released`, or `job:cancelled` when its cancel was requested. */
  #release(executions: Execution[], deadlineMs = 10_000): Promise<void> {
    return releaseExecutions(executions, deadlineMs, {
      release: (leases) => this.#ctx.queries.results.releaseWithStatus(this.#pool.pool, leases, this.id),
      events: this.#events,
      clock: this.#clock,
    });
  }

  /**
   * Stops gracefully: stops claiming, gives buffered jobs back at once, lets
   * running handlers finish for up to `shutdownTimeoutMs`, then aborts the rest
   * through their signal and gives their jobs back to `queued` without charging
   * the attempt. Resolves when results are written and connections closed, and
   * never later than about `shutdownTimeoutMs` + 3 s: statements that do not
   * answer by then are abandoned (their leases expire and the sweeper reclaims
   * the jobs). Idempotent.
   *
   * Called by a handler of this worker before the handler's first `await`
   * (as in `async (job) => { await worker.stop(); … }`), it does not wait for
   * that handler: it resolves once the other handlers are done or given back,
   * and the calling job ends by its handler's result, which stop waits for
   * until `shutdownTimeoutMs` (at least a second after the others are done)
   * before it aborts and gives back that job too. Called later in a handler
   * (or by a transactional handler, or one behind middleware, which start
   * after an `await` of the worker's), it is an ordinary stop: a handler that
   * awaits it is aborted at the deadline, and its job given back.
   */
  stop(): Promise<void> {
    const caller = this.#calling;
    // No stop is under way while a handler is called (none starts once stop() was called).
    if (caller !== undefined) this.#stopCallers.add(caller);
    // A stop during start waits for the start to finish, then undoes it.
    this.#stopPromise ??= (this.#startPromise ?? Promise.resolve()).catch(() => {}).then(() => this.#stop());
    return caller !== undefined ? this.#handlersDone : this.#stopPromise;
  }

  async #stop(): Promise<void> {
    const before = this.#state;
    this.#state = 'stopping';
    if (before !== 'running') {
      this.#resolveHandlersDone();
      // Never started, or its start failed (and closed the pool already).
      if (before !== 'stopped') await this.#closePools(1_000);
      this.#state = 'stopped';
      forgetOnSignals(this);
      return;
    }
    // Every step is bounded by what is left of shutdownTimeoutMs plus the grace,
    // the last part of which is kept for closing connections: a database that
    // does not answer (a half-open network) costs no more than that.
    const clock = this.#clock;
    const deadline = clock.monotonic() + this.#options.shutdownTimeoutMs;
    const hardDeadline = deadline + STOP_GRACE_MS;
    const remaining = () => Math.max(0, deadline - clock.monotonic());
    const graceLeft = () => Math.max(0, hardDeadline - CLOSE_RESERVE_MS - clock.monotonic());
    clock.clearTimeout(this.#bufferTimer);
    const claimLoopStopped = this.#claimLoop.stop();
    const buffered = this.#executions.takeBuffered();
    const releasingBuffered = this.#release(buffered, graceLeft());
    await this.#executions.whenIdle(remaining(), this.#stopCallers);
    await Promise.all([releasingBuffered, this.#giveBackRunning(this.#stopCallers, graceLeft())]);
    this.#resolveHandlersDone();
    if (this.#stopCallers.size > 0) {
      // Handlers that called stop() end by their own result: until the deadline, or a short while after the others.
      await this.#executions.whenIdle(Math.max(remaining(), Math.min(STOP_CALLER_GRACE_MS, graceLeft())));
      await this.#giveBackRunning(new Set(), graceLeft());
    }
    await settlesWithin(claimLoopStopped, graceLeft(), clock);
    await this.#completer.drain(graceLeft());
    await settlesWithin(
      Promise.all([this.#heartbeat.stop(), this.#maintainer.stop(), this.#cancellation.stop()]),
      graceLeft(),
      clock,
    );
    this.#events.quiet = remaining() === 0;
    // The reserve, and whatever the steps above left of the grace: the listener and the pools close side by side.
    const closeMs = Math.max(CLOSE_RESERVE_MS, hardDeadline - clock.monotonic());
    await Promise.all([this.#notifier.stop(closeMs), this.#closePools(closeMs)]);
    this.#events.quiet = true;
    this.#state = 'stopped';
    forgetOnSignals(this);
    this.#ctx.onStop(this);
    this.#events.emit('worker:stop');
  }

  /** Aborts the handlers still running (but those in `except`) and gives their jobs back. */
  #giveBackRunning(except: ReadonlySet<Execution>, deadlineMs: number): Promise<void> {
    const unfinished = this.#executions.running().filter((e) => e.state === 'running' && !except.has(e));
    for (const e of unfinished) e.control?.abort(new ShutdownError());
    return this.#release(unfinished, deadlineMs);
  }

  async #closePools(timeoutMs: number): Promise<void> {
    await Promise.all([this.#pool.close(timeoutMs), this.#transactional?.close(timeoutMs)]);
  }

  /** Warns once about server settings that defeat the jobs table's design. */
  async #warnAboutServer(): Promise<void> {
    for (const warning of await serverWarnings(this.#pool.pool)) this.#events.warn(warning);
  }
}
