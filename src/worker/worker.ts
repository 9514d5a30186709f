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
import type { ProgressWriteOutcome } from '../db/queries/progress.js';
import {
  CancelledError,
  LeaseLostError,
  SchemaVersionError,
  ShutdownError,
  SkiplockError,
} from '../errors.js';
import type { Maintainer } from '../maintenance/maintainer.js';
import { workerMaintenance } from '../maintenance/worker-maintenance.js';
import { assertMigrated } from '../migrations/migrator.js';
import { type Clock, systemClock, type TimerHandle } from '../runtime/clock.js';
import type { JobTracing } from '../telemetry/tracing.js';
import { successToWrite } from '../workflow/job-output.js';
import type { ProgressSink } from '../workflow/progress-writer.js';
import { BatchGathering } from './batch-gathering.js';
import { Cancellation } from './cancellation.js';
import { ClaimLoop, workerClaimRequest } from './claim-loop.js';
import { type Completer, resultWriter } from './completer.js';
import type { WorkerEvents } from './events.js';
import { EventReporter } from './events.js';
import { bufferedExecution, type Execution, Executions } from './executions.js';
import { AttemptControl, failure, type RunOutcome, runBatch, runJob } from './executor.js';
import { kindRetryDelayMs, type ResolvedBatch, type ResolvedHandler } from './handler-definition.js';
import { Heartbeat } from './heartbeat.js';
import { type Notifier, workerNotifier } from './notifier.js';
import type { ResolvedWorkerOptions } from './options.js';
import { releaseExecutions } from './release.js';
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
  /** Where handlers' `progress` and `log` write (one object for every attempt). */
  readonly #progressSink: ProgressSink;
  readonly #cancellation: Cancellation;
  readonly #heartbeat: Heartbeat<Execution>;
  readonly #notifier: Notifier;
  readonly #maintainer: Maintainer;
  readonly #pool: WorkerPool;
  /** The handler context's parents(), one function for every attempt. */
  readonly #parentsOf = (jobId: string) => this.#ctx.queries.dependencies.parents(this.#pool.pool, jobId);
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
  /** Releases in flight (buffer trims, expiries, a claim that returned during stop). */
  readonly #releasing = new Set<Promise<void>>();
  /**
   * The execution whose handler is being called, while the call has not
   * returned: a `stop()` made then comes from that handler. Set around the
   * synchronous call only, so knowing it costs a job nothing (no async context).
   */
  #calling: Execution | undefined;
  /** The same for a batch handler: the jobs of the batch being called. */
  #callingBatch: readonly Execution[] | undefined;
  /** Batches being gathered (batch handlers with `maxWaitMs`). */
  readonly #gathering: BatchGathering<Execution>;
  /** Slots held by batches, gathering or running: a batch takes one slot. */
  #batchSlots = 0;
  /** Jobs in those batches, not yet settled (counted in runningCount, not in slots). */
  #batchJobs = 0;

  constructor(ctx: WorkerContext, options: ResolvedWorkerOptions) {
    super();
    this.#ctx = ctx;
    this.#options = options;
    this.#clock = ctx.clock ?? systemClock;
    this.#executions = new Executions(this.#clock);
    this.#gathering = new BatchGathering(this.#clock, (kind, jobs, control) =>
      this.#launchBatch(kind, jobs, control),
    );
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
                running: this.#slotsUsed(),
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
    this.#progressSink = {
      clock: this.#clock,
      write: async (attempt, progressJson, lines) => {
        const e = attempt as Execution;
        let outcome: ProgressWriteOutcome;
        try {
          outcome = await queries.progress.write(pool, e, this.id, progressJson, lines);
        } catch (error) {
          this.#events.error(translateError(error), 'progress');
          return 'lost';
        }
        if (outcome === 'written' && this.#events.heard('job:progress'))
          this.#events.emit('job:progress', e.job, {
            progress: progressJson === null ? undefined : JSON.parse(progressJson),
            lines,
          });
        return outcome;
      },
    };
    this.#transactional = TransactionalAttempts.forWorker(ctx.clientConfig, options, {
      workerPool: pool,
      queries,
      workerId: this.id,
      events: this.#events,
      progressSink: this.#progressSink,
    });
    this.#completer = resultWriter({
      queries,
      pool,
      workerId: this.id,
      onSuccess: options.onSuccess,
      events: this.#events,
      wakeAfter: (delayMs) => this.#claimLoop.wakeAfter(delayMs),
      onBatchWritten: () => this.#claimLoop.slotFreed(),
      clock: this.#clock,
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
        renewLocked: (jobs) => queries.results.renewLocked(pool, jobs, this.id),
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

  /** Number of jobs running now (each job of a running or gathering batch counts). */
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
    // Listening before the first claim: a cancel or pause of a claimed job is
    // a message, and one sent before LISTEN would not be heard. The LISTEN
    // connection opens while the checks run; the checks take turns on one
    // connection of the pool, as each new connection costs the server more
    // than the reads do (the version check first: without the schema, the
    // read of limits fails too, and the version's error is the one to report).
    // The listener's events wait for the checks: a start that fails reports
    // its rejection alone.
    this.#events.hold();
    const listening = this.#options.listen ? this.#notifier.start() : undefined;
    let warnings: string[];
    try {
      await assertMigrated(this.#pool.pool, this.#ctx.schema);
      await this.#claimLoop.readLimits();
      warnings = await serverWarnings(this.#pool.pool);
      if (this.#ctx.tracing) this.#tracing = await this.#ctx.tracing();
      await listening;
    } catch (error) {
      this.#state = 'stopped';
      this.#ctx.onStop(this);
      await Promise.all([this.#notifier.stop(1_000), this.#closePools(1_000)]);
      this.#events.release(true);
      throw error instanceof SchemaVersionError ? error : translateError(error);
    }
    this.#state = 'running';
    if (this.#options.handleSignals) stopOnSignals(this);
    this.#completer.start();
    this.#heartbeat.start();
    this.#claimLoop.start();
    this.#maintainer.start();
    this.#expireBuffered();
    for (const warning of warnings) this.#events.warn(warning);
    // What was held comes once start() has resolved, so that a listener added
    // right after it hears the server's warnings, as after a round trip.
    setImmediate(() => this.#events.release());
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
    if (this.#gathering.size > 0) this.#fillBatches();
    this.#pump();
  }

  /** Slots in use: running single jobs, and batches. */
  #slotsUsed(): number {
    return this.#executions.runningCount - this.#batchJobs + this.#batchSlots;
  }

  /** Starts buffered jobs while slots are free. */
  #pump(): void {
    const { concurrency, jobTimeoutMs } = this.#options;
    while (this.#state === 'running' && this.#stopPromise === undefined && this.#slotsUsed() < concurrency) {
      const now = this.#clock.monotonic();
      const next = this.#executions.peek();
      // A job that waited long in the buffer starts only once its queue is known not to be paused.
      if (!next || !this.#cancellation.mayStart(next, now)) break;
      const handler = this.#handlers.get(next.job.kind);
      if (handler !== undefined && !handler.transactional && handler.batch !== undefined) {
        this.#openBatch(next.job.kind, handler.batch, now);
        continue;
      }
      const e = this.#executions.start(now);
      if (!e) break;
      this.#claimLoop.jobStarted();
      if (this.#events.heard('job:start')) this.#events.emit('job:start', e.job);
      const timeoutMs = handler?.timeoutMs ?? jobTimeoutMs;
      e.control!.parentsOf = this.#parentsOf;
      const attempt = handler?.transactional
        ? () => this.#transactional!.run(e, handler.handle, timeoutMs)
        : () => runJob(handler?.handle, e.job, e.control!, timeoutMs, this.#progressSink, e);
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
    this.#finishJob(e, outcome);
    this.#pump();
    this.#claimLoop.slotFreed();
  }

  /** Frees a settled job and queues its result (none when its lease is gone or it was given back). */
  #finishJob(e: Execution, outcome: RunOutcome | null): void {
    const lost = e.state === 'lost';
    const released = e.state === 'released';
    this.#executions.finish(e);
    if (lost) this.#events.emit('job:stale', e.job);
    else if (!released && outcome !== null) {
      if (outcome.ok) this.#succeeded(e, outcome.value);
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
  }

  // --- batch handlers ---

  /** Takes a slot for a batch of `kind` with the buffered jobs of that kind, and gathers or runs it. */
  #openBatch(kind: string, batch: ResolvedBatch, now: number): void {
    const room = this.#gathering.room(kind);
    if (room > 0) {
      this.#gathering.add(kind, this.#startBatchJobs(kind, room, now, undefined));
      return;
    }
    const control = new AttemptControl();
    const jobs = this.#startBatchJobs(kind, batch.maxBatchSize, now, control);
    this.#batchSlots++;
    this.#claimLoop.jobStarted();
    this.#batchControls.set(kind, control);
    this.#gathering.open(kind, jobs, batch.maxBatchSize, batch.maxWaitMs, control);
  }

  /** Newly buffered jobs join the open batches of their kinds. */
  #fillBatches(): void {
    const now = this.#clock.monotonic();
    for (const kind of this.#gathering.kinds()) {
      const room = this.#gathering.room(kind);
      if (room > 0) this.#gathering.add(kind, this.#startBatchJobs(kind, room, now, undefined));
    }
  }

  /**
   * Starts up to `max` buffered jobs of `kind` for a batch. Each keeps its own
   * abort side: a cancel ends that job at once; a stop aborts the batch
   * (`control`, or the open batch's when joining one).
   */
  #startBatchJobs(kind: string, max: number, now: number, control: AttemptControl | undefined): Execution[] {
    const jobs = this.#executions.startKind(kind, max, now);
    this.#batchJobs += jobs.length;
    for (const e of jobs) {
      if (this.#events.heard('job:start')) this.#events.emit('job:start', e.job);
      e.control!.onAbort = (reason) => {
        if (reason instanceof CancelledError) this.#settleBatchJob(e, failure(reason));
        else if (reason instanceof ShutdownError) (control ?? this.#batchControls.get(kind))?.abort(reason);
      };
    }
    return jobs;
  }

  /** The control of each kind's open batch, for jobs that join it later. */
  readonly #batchControls = new Map<string, AttemptControl>();

  /** Runs a gathered batch: its jobs still held, in one call of the handler. */
  #launchBatch(kind: string, jobs: Execution[], control: AttemptControl): void {
    if (this.#batchControls.get(kind) === control) this.#batchControls.delete(kind);
    // Jobs lost or given back while the batch gathered are let go; those cancelled are ended already.
    const live: Execution[] = [];
    for (const e of jobs) {
      if (e.state === 'running') live.push(e);
      else this.#settleBatchJob(e, null);
    }
    if (live.length === 0) {
      this.#batchSlots--;
      this.#pump();
      this.#claimLoop.slotFreed();
      return;
    }
    const handler = this.#handlers.get(kind) as Extract<ResolvedHandler, { transactional: false }>;
    const startedAt = this.#clock.monotonic();
    this.#callingBatch = live;
    let running: Promise<RunOutcome[]>;
    try {
      running = runBatch(
        handler.batch!,
        live.map((e) => e.job),
        control,
        handler.timeoutMs ?? this.#options.jobTimeoutMs,
      );
    } finally {
      this.#callingBatch = undefined;
    }
    const tracing = this.#tracing;
    // Each job gets its `process` span, ended by its own outcome (spans the handler starts are not their children).
    const traced = tracing
      ? Promise.all(
          live.map((e, i) => tracing.process(e.job, e.traceContext, () => running.then((o) => o[i]!))),
        )
      : running;
    void traced.then((outcomes) => {
      // The run time per job: the claim loop then buffers enough to fill the next batches.
      this.#claimLoop.jobFinished((this.#clock.monotonic() - startedAt) / live.length);
      this.#trimBuffer();
      for (let i = 0; i < live.length; i++) this.#settleBatchJob(live[i]!, outcomes[i]!);
      this.#batchSlots--;
      this.#pump();
      this.#claimLoop.slotFreed();
    });
  }

  /** Ends one job of a batch (once: a job cancelled before its batch settled is not ended again). */
  #settleBatchJob(e: Execution, outcome: RunOutcome | null): void {
    if (e.state === 'done') return;
    this.#batchJobs--;
    this.#finishJob(e, outcome);
  }

  // --- end batch handlers ---

  /**
   * Queues a success: with the handler's return value as the job's result when
   * its row outlives the success, or as a failure when that value is not JSON
   * or larger than `maxResultBytes`. A job of the worker's policy that returned
   * nothing writes exactly what it always did.
   */
  #succeeded(e: Execution, value: unknown): void {
    let success: ReturnType<typeof successToWrite>;
    try {
      success = successToWrite(value, e.onSuccess, this.#options.onSuccess, this.#options.maxResultBytes);
    } catch (error) {
      const failed = failure(error);
      if (!failed.ok)
        this.#completer.failed({ job: e, thrown: error, error: failed.error, permanent: false });
      return;
    }
    this.#completer.succeeded(e, success);
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
    const releasing = releaseExecutions(executions, deadlineMs, {
      release: (leases) => this.#ctx.queries.results.releaseWithStatus(this.#pool.pool, leases, this.id),
      events: this.#events,
      clock: this.#clock,
    });
    // Stop waits for every release before it closes the pool, which would drop a queued one.
    this.#releasing.add(releasing);
    void releasing.finally(() => this.#releasing.delete(releasing));
    return releasing;
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
   * (as in `async (job) => { await worker.stop(); … }`; for a batch handler,
   * all the jobs of its batch), it does not wait for that handler: it
   * resolves once the other handlers are done or given back (and the jobs of
   * a claim in flight with them, waited for until `shutdownTimeoutMs`), and
   * the calling job ends by its handler's result, which stop waits for until
   * `shutdownTimeoutMs` (at least a second after the others are done) before
   * it aborts and gives back that job too. Called later in a handler
   * (or by a transactional handler, or one behind middleware, which start
   * after an `await` of the worker's), it is an ordinary stop: a handler that
   * awaits it is aborted at the deadline, and its job given back.
   */
  stop(): Promise<void> {
    const callers = this.#calling ? [this.#calling] : this.#callingBatch;
    // No stop is under way while a handler is called (none starts once stop() was called).
    if (callers) for (const e of callers) this.#stopCallers.add(e);
    // A stop during start waits for the start to finish, then undoes it.
    this.#stopPromise ??= (this.#startPromise ?? Promise.resolve()).catch(() => {}).then(() => this.#stop());
    return callers ? this.#handlersDone : this.#stopPromise;
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
    // Gathering batches run now with what they have; stop waits for them like any handler.
    this.#gathering.flush();
    const buffered = this.#executions.takeBuffered();
    const releasingBuffered = this.#release(buffered, graceLeft());
    await this.#executions.whenIdle(remaining(), this.#stopCallers);
    await Promise.all([releasingBuffered, this.#giveBackRunning(this.#stopCallers, graceLeft())]);
    // A claim in flight comes back and its jobs are given back before a handler's stop() resolves,
    // within shutdownTimeoutMs: the grace past it is the calling handler's.
    await settlesWithin(claimLoopStopped, remaining(), clock);
    await settlesWithin(Promise.all(this.#releasing), remaining(), clock);
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
    await settlesWithin(Promise.all(this.#releasing), graceLeft(), clock);
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
}
