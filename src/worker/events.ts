/**
 * How a worker speaks: the typed events it emits, and the reporter that emits
 * them safely. Tests and the CLI wait on these instead of sleeping; background
 * loops report their errors as `error` events (or on the console when nobody
 * listens) instead of throwing. A listener that throws is reported as an
 * `error` from source `listener` and changes nothing else; an `error`
 * listener that throws falls back to the console.
 */
import type { EventEmitter } from 'node:events';
import type { SkiplockError } from '../errors.js';
import type { Job } from '../job/job.js';
import { emitError, emitGuarded } from '../runtime/guarded-events.js';

/** Which part of the worker an `error` event came from. */
export type WorkerErrorSource =
  | 'start'
  | 'claim'
  | 'complete'
  | 'heartbeat'
  | 'sweep'
  | 'schedule'
  | 'notifier'
  | 'release'
  | 'prune'
  | 'archive'
  | 'parents'
  | 'progress'
  | 'listener'
  /** A transactional handler's connection could not be had: its job waits, uncharged, and tries again. */
  | 'transaction';

/** What a failed attempt led to, as written to the database. */
export interface FailureOutcomeInfo {
  /** `queued` (retry after backoff), `failed` (permanent error) or `dead` (out of attempts). */
  status: 'queued' | 'failed' | 'dead';
  /** Milliseconds until the retry is due (0 unless `queued`). */
  retryDelayMs: number;
  /** The text stored in `last_error`. */
  lastError: string;
}

/** Timings of a succeeded attempt. */
export interface SuccessInfo {
  /** Handler run time, in milliseconds. */
  durationMs: number;
  /**
   * Time the job waited to start after it became due (`run_at`), in
   * milliseconds, by this process's clock against the database's `run_at`.
   */
  waitMs: number;
}

/** Event name → listener arguments. */
export interface WorkerEvents {
  /** A handler is about to run a claimed job. */
  'job:start': [job: Job];
  /** A job's success was committed (deleted, kept or archived per `onSuccess`). */
  'job:success': [job: Job, info: SuccessInfo];
  /** A job's failure was committed: `thrown` is what the handler threw; `outcome` what the job became. */
  'job:failure': [job: Job, thrown: unknown, outcome: FailureOutcomeInfo];
  /**
   * A handler's progress or log lines were written: `progress` is the value
   * written (undefined when only lines were), `lines` the lines appended.
   */
  'job:progress': [job: Job, info: { progress: unknown; lines: string[] }];
  /** A job this worker held ended `cancelled` (its cancel was requested while it ran or waited in the buffer). */
  'job:cancelled': [job: Job];
  /** A handler threw a SnoozeError: the job is `queued` again, due in `delayMs`, its attempt not charged. */
  'job:snoozed': [job: Job, info: { delayMs: number }];
  /** A result was not written because the lease had been reclaimed: the job's next attempt owns it. */
  'job:stale': [job: Job];
  /** An unfinished or buffered job was given back to `queued` without charging the attempt (stop, or too long in the buffer). */
  'job:released': [job: Job];
  /** A heartbeat found that a held job's lease had been reclaimed; its signal was aborted. */
  'lease:lost': [job: Job];
  /** A claim returned this many jobs (emitted only when > 0). */
  'worker:claim': [count: number];
  /**
   * A sweep ran under the lock and reclaimed jobs (requeued, or dead when out
   * of attempts) or expired queued jobs past their start deadline.
   */
  'worker:sweep': [result: { requeued: number; dead: number; expired: number }];
  /** A prune (worker option `retentionMs`) ran under the lock and deleted finished rows. */
  'worker:prune': [result: { jobs: number; archive: number; archivePartitions: number }];
  /** The archive's partition upkeep created or dropped day partitions (or left expired ones for a later turn). */
  'worker:archive': [result: { created: number; dropped: number; skipped: number }];
  /** The LISTEN connection is (re)established. */
  'worker:listen': [];
  /**
   * Something about the database or the network that the operator should fix:
   * autovacuum is off, the LISTEN connection hears nothing (a half-open
   * socket, LISTEN through a transaction pooler; once per spell, while the
   * worker polls and replaces the connection), or the scheduler parked a
   * schedule it cannot use (once, naming it; see `ScheduleInfo.parkedReason`).
   */
  'worker:warning': [message: string];
  /** The worker stopped: no handler of it is running and its results are written. */
  'worker:stop': [];
  /** A background loop hit an error; it retries by itself. */
  error: [error: SkiplockError, source: WorkerErrorSource];
}

/** Emits a worker's events safely. */
export class EventReporter {
  readonly #emitter: EventEmitter<WorkerEvents>;
  readonly #workerId: string;
  /** Connections are being dropped on purpose (past the stop deadline): their errors are expected. */
  quiet = false;
  /** Events held back by {@link EventReporter.hold}, in order; undefined when not holding. */
  #held: (() => void)[] | undefined;

  constructor(emitter: EventEmitter<WorkerEvents>, workerId: string) {
    this.#emitter = emitter;
    this.#workerId = workerId;
  }

  /** Whether anyone listens to `event` (so that a caller can skip building its arguments). */
  heard(event: keyof WorkerEvents): boolean {
    return this.#emitter.listenerCount(event) > 0;
  }

  /**
   * Holds every event back until {@link EventReporter.release}: a worker's
   * start, whose failure is its rejection alone, and whose events come once it
   * has resolved.
   */
  hold(): void {
    this.#held ??= [];
  }

  /** Emits the events held back, in order, or drops them (`drop`); then emits as they come. */
  release(drop = false): void {
    const held = this.#held;
    this.#held = undefined;
    if (!drop) for (const emit of held ?? []) emit();
  }

  /** Emits `event`; a listener that throws is reported once. */
  emit<K extends keyof WorkerEvents>(event: K, ...args: WorkerEvents[K]): void {
    if (this.#held) return void this.#held.push(() => this.emit(event, ...args));
    emitGuarded(this.#emitter as EventEmitter, event, args, (error) => this.error(error, 'listener'));
  }

  /** Reports a background error; the loop that hit it retries by itself. */
  error(error: SkiplockError, source: WorkerErrorSource): void {
    if (this.#held) return void this.#held.push(() => this.error(error, source));
    if (this.quiet) return;
    emitError(this.#emitter as EventEmitter, error, source, `worker ${this.#workerId}`);
  }

  /** A warning for the operator: `worker:warning`, or the console when nobody listens. */
  warn(message: string): void {
    if (this.#held) return void this.#held.push(() => this.warn(message));
    if (this.heard('worker:warning')) this.emit('worker:warning', message);
    else console.warn(`[skiplock] worker ${this.#workerId}: warning: ${message}`);
  }
}
