/**
 * What a broker-side worker does with one delivered job, whichever the broker:
 * runs the handler through the executor the PostgreSQL worker uses, then acks
 * a success; on a retryable failure (or a snooze) publishes the job again with
 * its attempts, history and a not-before instant, and acks the delivery; when
 * the job ends `dead` or `failed`, writes it back to the jobs table with its
 * history, then acks. A delivery that arrives before its not-before instant is
 * handed back with that delay, so the retry waits out its backoff in the broker.
 */

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { translateError } from '../db/executor.js';
import { RelayQueries } from '../db/queries/relay.js';
import { schemaNames } from '../db/queries/schema-names.js';
import { ShutdownError, SkiplockError, ValidationError } from '../errors.js';
import { MAX_ATTEMPT_ERROR_CHARS, MAX_ATTEMPT_ERRORS } from '../job/attempt-history.js';
import { backoffDelayMs } from '../job/backoff.js';
import { truncated } from '../job/failure.js';
import type { Job, JobMap } from '../job/job.js';
import { refuseUnknownOptions } from '../options.js';
import { type RelayedJob, readNamespace, toHandlerJob } from '../relay/message.js';

import { emitError, emitGuarded } from '../runtime/guarded-events.js';
import type { Skiplock } from '../skiplock.js';
import type { FailureOutcomeInfo } from '../worker/events.js';
import { AttemptControl, failure, type RunOutcome, runJob } from '../worker/executor.js';
import { kindRetryDelayMs, type ResolvedHandler, resolveHandlers } from '../worker/handler-definition.js';
import type { Handlers } from '../worker/options.js';
import { forgetOnSignals, stopOnSignals } from '../worker/signals.js';

export type { RelayedJob } from '../relay/message.js';

/** Options every broker-side worker takes. */
export interface BrokerWorkerOptions<Jobs extends JobMap> {
  /** Handlers by kind, as `skiplock.worker` takes them (transactional ones excepted). */
  handlers: Handlers<Jobs>;
  /** Queues to consume. @default ['default'] */
  queues?: string[];
  /** Handlers running at once (1…1000). @default 10 */
  concurrency?: number;
  /** Run time after which an attempt fails (retryable), in milliseconds, unless its kind gives `timeoutMs`. @default none */
  jobTimeoutMs?: number;
  /** How long `stop()` lets running handlers finish before aborting them, in milliseconds. @default 30000 */
  shutdownTimeoutMs?: number;
  /** Stop gracefully on SIGTERM/SIGINT. @default true */
  handleSignals?: boolean;
  /** Id recorded in the attempt history. @default `<hostname>:<pid>:<random>` */
  workerId?: string;
}

/** The events of a broker-side worker. */
export interface BrokerWorkerEvents {
  /** A handler is about to run a job. */
  'job:start': [job: Job];
  /** A handler succeeded and the delivery was acknowledged. */
  'job:success': [job: Job];
  /** An attempt failed: retried (`queued`), or written back `failed` or `dead`. */
  'job:failure': [job: Job, thrown: unknown, outcome: FailureOutcomeInfo];
  /** A handler threw a SnoozeError: the job comes back after `delayMs`, its attempt not charged. */
  'job:snoozed': [job: Job, info: { delayMs: number }];
  /** A broker or database error; the worker goes on. */
  error: [error: SkiplockError, source: 'consume' | 'publish' | 'write-back' | 'listener'];
  /** The worker stopped. */
  'worker:stop': [];
}

/** One delivered message, as the broker's glue gives it. */
export interface Delivery {
  job: RelayedJob;
  /** Acknowledges the delivery: the broker forgets it. */
  ack(): Promise<void> | void;
  /** Hands the delivery back, to come again after `delayMs`. */
  retry(delayMs: number): Promise<void> | void;
  /** Tells the broker the handler is still running (extends its ack deadline). */
  working(): void;
}

/**
 * Publishes a job again (a retry or a snooze), resolving once the broker
 * acknowledged it; rejects with a {@link MessageRefusedError} when the broker
 * can never take that message.
 */
export type Republish = (job: RelayedJob) => Promise<void>;

/**
 * A job's next message that the broker can never take as it is (larger than
 * the server accepts): the job then ends `failed` with this reason rather
 * than running again and again.
 */
export class MessageRefusedError extends Error {}

/** Resolved options. */
export interface BrokerWorkerSettings {
  handlers: Map<string, ResolvedHandler>;
  queues: string[];
  concurrency: number;
  jobTimeoutMs: number | undefined;
  shutdownTimeoutMs: number;
  handleSignals: boolean;
  workerId: string;
}

/**
 * Acknowledges or hands back a delivery: `answer` throws on a connection or
 * channel the broker closed, and the broker then delivers the message again
 * (or already has), so the throw is dropped.
 */
export function settle(answer: () => void): void {
  try {
    answer();
  } catch {}
}

/**
 * What `promise` resolves to within `timeoutMs` milliseconds, or `'late'`
 * after that (the promise is left to settle unheard). For a broker's close,
 * which waits for an answer a deaf connection never sends.
 */
export async function withinMs<T>(promise: Promise<T>, timeoutMs: number): Promise<T | 'late'> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The keys of {@link BrokerWorkerOptions}. */
const BROKER_WORKER_KEYS: readonly string[] = [
  'handlers',
  'queues',
  'concurrency',
  'jobTimeoutMs',
  'shutdownTimeoutMs',
  'handleSignals',
  'workerId',
];

/** How long a job of a kind without a handler here goes back to the broker before it is delivered again. */
const UNKNOWN_KIND_RETRY_MS = 5000;

/**
 * Validates the options every broker-side worker shares; `ownKeys` are the
 * broker's own options (checked by it), any other key is refused.
 *
 * @throws {ValidationError} naming the field (`natsWorker.handlers.send_email.maxAttempts`,
 *   `natsWorker.concurency` as an unknown option…).
 */
export function resolveBrokerWorkerOptions(
  options: BrokerWorkerOptions<JobMap>,
  field: string,
  ownKeys: readonly string[] = [],
): BrokerWorkerSettings {
  refuseUnknownOptions(options, field, [...BROKER_WORKER_KEYS, ...ownKeys]);
  const { handleSignals = true, workerId } = options;
  if (typeof handleSignals !== 'boolean')
    throw new ValidationError(`${field}.handleSignals`, 'must be a boolean');
  if (workerId !== undefined && (typeof workerId !== 'string' || workerId === '' || workerId.length > 200))
    throw new ValidationError(`${field}.workerId`, 'must be a string of 1…200 characters');
  const handlers = resolveHandlers(options.handlers, `${field}.handlers`);
  if (handlers.size === 0) throw new ValidationError(`${field}.handlers`, 'must name at least one kind');
  for (const [kind, handler] of handlers)
    if (handler.transactional)
      throw new ValidationError(
        `${field}.handlers.${kind}`,
        'transactional handlers run only in PostgreSQL workers',
      );
    else if (handler.batch !== undefined)
      throw new ValidationError(
        `${field}.handlers.${kind}`,
        'batch handlers (handleBatch) run only in PostgreSQL workers',
      );
  const positive = (value: unknown, name: string, max: number): number | undefined => {
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max)
      throw new ValidationError(`${field}.${name}`, `must be an integer 1…${max}`);
    return value;
  };
  const queues = options.queues ?? ['default'];
  if (!Array.isArray(queues) || queues.length === 0 || queues.some((q) => typeof q !== 'string' || q === ''))
    throw new ValidationError(`${field}.queues`, 'must be a non-empty list of queue names');
  return {
    handlers,
    queues: [...new Set(queues)],
    concurrency: positive(options.concurrency, 'concurrency', 1000) ?? 10,
    jobTimeoutMs: positive(options.jobTimeoutMs, 'jobTimeoutMs', 2_147_483_647),
    shutdownTimeoutMs: positive(options.shutdownTimeoutMs, 'shutdownTimeoutMs', 2_147_483_647) ?? 30_000,
    handleSignals,
    workerId: workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`,
  };
}

/**
 * The message ids of the jobs a broker-side worker finished lately (the newest
 * 10,000), so that a copy delivered again (a redelivery that crossed the
 * acknowledgement, a duplicate publish) is dropped instead of run twice.
 */
export class FinishedMessages {
  readonly #ids = new Set<string>();

  has(messageId: string): boolean {
    return this.#ids.has(messageId);
  }

  add(messageId: string): void {
    this.#ids.add(messageId);
    if (this.#ids.size > 10_000) this.#ids.delete(this.#ids.values().next().value!);
  }
}

/**
 * What every broker-side worker shares: its id and settings, the runner of
 * its deliveries, and `start()` and `stop()` with their signal handlers and
 * `worker:stop` event. A broker's worker adds how it connects and consumes
 * ({@link BrokerWorker.connect}) and how it stops ({@link BrokerWorker.disconnect}).
 */
export abstract class BrokerWorker extends EventEmitter<BrokerWorkerEvents> {
  /** The id recorded in the attempt history. */
  readonly id: string;
  protected readonly settings: BrokerWorkerSettings;
  protected readonly runner: DeliveryRunner;
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;

  /**
   * @param field the factory's name, for errors (`natsWorker`).
   * @param ownKeys the broker's own options, which it checks itself.
   * @param heartbeatMs how often a running attempt keeps its delivery with the broker, in milliseconds.
   * @throws {ValidationError} naming the field (`natsWorker.handlers.send_email.maxAttempts`…).
   */
  protected constructor(
    skiplock: Skiplock,
    options: BrokerWorkerOptions<JobMap>,
    field: string,
    ownKeys: readonly string[],
    heartbeatMs: number,
  ) {
    super();
    this.settings = resolveBrokerWorkerOptions(options, field, ownKeys);
    this.id = this.settings.workerId;
    this.runner = new DeliveryRunner(skiplock, this.settings, this, heartbeatMs);
  }

  /** Handlers running now. */
  get activeCount(): number {
    return this.runner.activeCount;
  }

  /** Whether `stop()` was called. */
  protected get stopping(): boolean {
    return this.#stopping !== undefined;
  }

  /**
   * Connects and starts consuming; resolves once it consumes. A call while a
   * start is under way shares it; after a start that failed, a call tries
   * again; once started or stopping, nothing more.
   *
   * @throws the broker's error when it cannot connect or set up what it consumes.
   */
  start(): Promise<void> {
    if (this.#stopping) return Promise.resolve();
    this.#starting ??= this.connect().then(
      () => {
        if (!this.#stopping && this.settings.handleSignals) stopOnSignals(this);
      },
      (error: unknown) => {
        this.#starting = undefined;
        throw error;
      },
    );
    return this.#starting;
  }

  /**
   * Stops: no new deliveries; running handlers finish within
   * `shutdownTimeoutMs`, then are aborted and their deliveries handed back
   * (the attempt not charged); then the connection closes. Called while
   * `start()` is under way, it waits for that start to end first, so what
   * the start opened is closed too.
   */
  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      await this.#starting?.catch(() => {});
      await this.disconnect();
      forgetOnSignals(this);
      this.emit('worker:stop');
    })();
    return this.#stopping;
  }

  /** Connects and starts consuming, leaving nothing open when it throws. */
  protected abstract connect(): Promise<void>;

  /** Stops consuming, drains the runner within `shutdownTimeoutMs` and closes the connection, each step bounded. */
  protected abstract disconnect(): Promise<void>;
}

/** Runs deliveries with the handlers: the part of a broker-side worker that knows no broker. */
export class DeliveryRunner {
  readonly #settings: BrokerWorkerSettings;
  readonly #emitter: EventEmitter<BrokerWorkerEvents>;
  readonly #skiplock: Skiplock;
  readonly #queries: RelayQueries;
  #namespace: Promise<string> | undefined;
  readonly #running = new Map<AttemptControl, Promise<void>>();
  readonly #heartbeatMs: number;

  constructor(
    skiplock: Skiplock,
    settings: BrokerWorkerSettings,
    emitter: EventEmitter<BrokerWorkerEvents>,
    heartbeatMs: number,
  ) {
    this.#skiplock = skiplock;
    this.#settings = settings;
    this.#emitter = emitter;
    this.#queries = new RelayQueries(schemaNames(skiplock.schema));
    this.#heartbeatMs = heartbeatMs;
  }

  /** Handlers running now. */
  get activeCount(): number {
    return this.#running.size;
  }

  /** Runs one delivery to its end (never rejects); `republish` sends retries and snoozes. */
  run(delivery: Delivery, republish: Republish): Promise<void> {
    const control = new AttemptControl();
    const done = this.#run(delivery, republish, control)
      .catch((error: unknown) => this.report(error, 'consume'))
      .finally(() => this.#running.delete(control));
    this.#running.set(control, done);
    return done;
  }

  /** Waits up to `timeoutMs` for running handlers, then aborts them with a ShutdownError and waits for their deliveries to be handed back. */
  async drain(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([Promise.allSettled([...this.#running.values()]), deadline]);
    clearTimeout(timer);
    for (const control of this.#running.keys()) control.abort(new ShutdownError());
    await Promise.allSettled([...this.#running.values()]);
  }

  /** Emits `event`; a listener that throws is reported as an `error` from source `listener`. */
  #notify<K extends Exclude<keyof BrokerWorkerEvents, 'error'>>(
    event: K,
    ...args: BrokerWorkerEvents[K]
  ): void {
    emitGuarded(this.#emitter as EventEmitter, event, args, (error) => this.report(error, 'listener'));
  }

  /** Reports a background error as an `error` event (or on the console when nobody listens). */
  report(error: unknown, source: BrokerWorkerEvents['error'][1]): void {
    const translated =
      error instanceof SkiplockError
        ? error
        : source === 'write-back'
          ? translateError(error)
          : new SkiplockError('BROKER', error instanceof Error ? error.message : String(error), {
              cause: error,
            });
    emitError(this.#emitter as EventEmitter, translated, source, `broker worker ${this.#settings.workerId}`);
  }

  /** Kinds without a handler here whose jobs were given back (reported once each). */
  readonly #unknownKinds = new Set<string>();

  async #run(delivery: Delivery, republish: Republish, control: AttemptControl): Promise<void> {
    const relayed = delivery.job;
    const waitMs = relayed.notBefore === undefined ? 0 : Date.parse(relayed.notBefore) - Date.now();
    if (waitMs > 0) {
      await delivery.retry(waitMs);
      return;
    }
    const handler = this.#settings.handlers.get(relayed.kind);
    if (!handler) {
      // As a PostgreSQL worker claims only the kinds it handles, so that workers of
      // different versions share a queue: given back for one that has a handler, uncharged.
      if (!this.#unknownKinds.has(relayed.kind)) {
        this.#unknownKinds.add(relayed.kind);
        this.report(
          new SkiplockError(
            'BROKER',
            `no handler for kind ${JSON.stringify(relayed.kind)} here: its jobs are given back (every ${UNKNOWN_KIND_RETRY_MS} ms) for a worker that has one`,
          ),
          'consume',
        );
      }
      await delivery.retry(UNKNOWN_KIND_RETRY_MS);
      return;
    }
    const maxAttempts =
      relayed.maxAttemptsDefault && handler.maxAttempts !== undefined
        ? handler.maxAttempts
        : relayed.maxAttempts;
    const attempt = relayed.attempts + 1;
    const job = toHandlerJob(relayed, attempt, maxAttempts);
    this.#notify('job:start', job);
    const heartbeat = setInterval(() => delivery.working(), this.#heartbeatMs);
    let outcome: RunOutcome;
    try {
      // A handler that ignores its signal on stop is not waited for: the delivery goes back at once.
      const stopped = new Promise<RunOutcome>((resolve) =>
        control.signal.addEventListener('abort', () => resolve(failure(control.reason)), { once: true }),
      );
      outcome = await Promise.race([
        runJob(
          handler.handle as Parameters<typeof runJob>[0],
          job,
          control,
          handler.timeoutMs ?? this.#settings.jobTimeoutMs,
        ),
        stopped,
      ]);
    } finally {
      clearInterval(heartbeat);
    }
    if (outcome.ok) {
      await delivery.ack();
      this.#notify('job:success', job);
      return;
    }
    if (control.reason instanceof ShutdownError) {
      // Stopped: the delivery comes back at once; the attempt is not charged (it is counted from the message).
      await delivery.retry(0);
      return;
    }
    const base = { ...relayed, hop: (relayed.hop ?? 0) + 1 };
    const ending: Ending = { delivery, relayed, job, attempt, maxAttempts, thrown: outcome.thrown };
    if (outcome.snoozeDelayMs !== undefined) {
      const notBefore = new Date(Date.now() + outcome.snoozeDelayMs).toISOString();
      if (await this.#forward(republish, { ...base, notBefore }, ending))
        this.#notify('job:snoozed', job, { delayMs: outcome.snoozeDelayMs });
      return;
    }
    const errors = withAttemptError(relayed.errors, attempt, outcome.error, this.#settings.workerId);
    if (!outcome.permanent && attempt < maxAttempts) {
      const retryDelayMs = Math.round(kindRetryDelayMs(handler, job, outcome) ?? backoffDelayMs(attempt));
      const notBefore = new Date(Date.now() + retryDelayMs).toISOString();
      if (await this.#forward(republish, { ...base, attempts: attempt, errors, notBefore }, ending))
        this.#notify('job:failure', job, outcome.thrown, {
          status: 'queued',
          retryDelayMs,
          lastError: outcome.error,
        });
      return;
    }
    await this.#end(ending, outcome.permanent ? 'failed' : 'dead', outcome.error, errors);
  }

  /**
   * Writes the job back `dead` or `failed` with its history, then acks the
   * delivery; when the write fails, the delivery comes back and the attempt
   * runs again.
   */
  async #end(ending: Ending, status: 'dead' | 'failed', lastError: string, errors: unknown[]): Promise<void> {
    const { delivery, relayed, job, attempt, maxAttempts, thrown } = ending;
    try {
      // A job relayed from another database or schema shares ids with this one's
      // jobs: written here, it would overwrite or shadow an unrelated job.
      const own = await this.#ownNamespace();
      if (relayed.namespace !== own) {
        this.report(
          new SkiplockError(
            'BROKER',
            `job ${relayed.id} ended ${status} but was relayed from another database or schema (namespace ${relayed.namespace}, this worker's is ${own}): not written back here, and dropped`,
          ),
          'write-back',
        );
        await delivery.ack();
        return;
      }
      await this.#queries.writeBack(this.#skiplock.pool, {
        id: relayed.id,
        queue: relayed.queue,
        kind: relayed.kind,
        payload: relayed.payload,
        priority: relayed.priority,
        runAt: new Date(relayed.runAt),
        createdAt: new Date(relayed.createdAt),
        maxAttempts,
        maxAttemptsDefault: relayed.maxAttemptsDefault,
        leaseSeq: relayed.leaseSeq,
        status,
        attempts: attempt,
        lastError,
        errors,
        tags: relayed.tags ?? null,
        groupKey: relayed.groupKey ?? null,
      });
    } catch (error) {
      // Not written: the delivery comes back and the attempt runs again.
      this.report(error, 'write-back');
      await delivery.retry(1000);
      return;
    }
    await delivery.ack();
    this.#notify('job:failure', job, thrown, { status, retryDelayMs: 0, lastError });
  }

  /** The namespace of this worker's database and schema (as the relay names it), read once. */
  #ownNamespace(): Promise<string> {
    this.#namespace ??= readNamespace(this.#queries, this.#skiplock.pool, this.#skiplock.schema).catch(
      (error: unknown) => {
        this.#namespace = undefined;
        throw error;
      },
    );
    return this.#namespace;
  }

  /**
   * Publishes the job's next message, then acks this one (a crash between the
   * two republishes the same message id); true when it did. A message the
   * broker can never take ends the job `failed` instead, written back with
   * the next message's history and the reason as this attempt's last entry;
   * a broker error hands the delivery back.
   */
  async #forward(republish: Republish, next: RelayedJob, ending: Ending): Promise<boolean> {
    try {
      await republish(next);
    } catch (error) {
      if (error instanceof MessageRefusedError) {
        const lastError = `its next message could not be published: ${error.message}`;
        const history = withAttemptError(next.errors, ending.attempt, lastError, this.#settings.workerId);
        await this.#end(ending, 'failed', lastError, history);
        return false;
      }
      this.report(error, 'publish');
      await ending.delivery.retry(1000);
      return false;
    }
    await ending.delivery.ack();
    return true;
  }
}

/** One attempt on its way to its end: what {@link DeliveryRunner}'s write-back needs. */
interface Ending {
  delivery: Delivery;
  relayed: RelayedJob;
  job: Job;
  attempt: number;
  maxAttempts: number;
  thrown: unknown;
}

/**
 * `errors` with the attempt's error appended (its text cut to the stored
 * length), cut to the newest entries kept, as the PostgreSQL worker stores them.
 */
function withAttemptError(
  errors: readonly unknown[],
  attempt: number,
  error: string,
  worker: string,
): unknown[] {
  return [
    ...errors,
    { attempt, error: truncated(error, MAX_ATTEMPT_ERROR_CHARS), at: new Date().toISOString(), worker },
  ].slice(-MAX_ATTEMPT_ERRORS);
}
