/**
 * Cancel and pause on the worker's side. Messages on the wake-up channel are
 * hints — any role that can connect can send one — so the worker acts only on
 * what the database says:
 *
 * - A cancel message naming jobs this worker holds makes it read their rows'
 *   cancel request (one statement for every message that arrived meanwhile).
 *   A running job whose cancel was requested has its handler's signal aborted
 *   with a {@link CancelledError}, which ends the attempt at once (its result
 *   then ends the job `cancelled`); a buffered one is given back, which ends
 *   it `cancelled` too. The heartbeat finds such rows as well: the safety net
 *   of a cancel message that did not arrive.
 * - A pause message for a queue this worker buffers jobs of makes it read
 *   which of the buffered jobs' queues are paused, and give back the buffered
 *   jobs of those. Without the message (no LISTEN, behind a transaction
 *   pooler, or lost), a buffered job claimed more than
 *   {@link PAUSE_RECHECK_MS} ago starts only after such a read, sent no longer
 *   than that ago, found its queue running. So no job of a paused queue starts
 *   later than about {@link PAUSE_RECHECK_MS} after `pauseQueue()` resolved
 *   (or one and a half round trips of that read, when the database answers
 *   slower than that: a read is never too old on arrival, so jobs still start).
 *
 * Reads run one at a time, at most one every {@link CONTROL_READ_INTERVAL_MS}:
 * a flood of forged messages costs a bounded rate of cheap reads.
 */
import { translateError } from '../db/executor.js';
import { leaseKey } from '../db/queries/job-row.js';
import type { WakeUp } from '../db/wake-up.js';
import { CancelledError, type SkiplockError } from '../errors.js';
import { type Clock, systemClock } from '../runtime/clock.js';
import { CONTROL_READ_INTERVAL_MS, Coalesced } from './coalesced.js';
import type { Execution, Executions } from './executions.js';
import { loopBackoffMs } from './loop-backoff.js';

/** Why buffered jobs are given back: their cancel, or their queue was paused. */
export type GiveBackReason = 'cancel' | 'pause';

/**
 * A buffered job claimed longer ago than this (milliseconds) starts only
 * after a read of its queue's paused state sent within this time.
 */
export const PAUSE_RECHECK_MS = 1_000;

/** What cancel and pause need from their worker. */
export interface CancellationDeps {
  executions: Executions;
  /** The worker's queues (pause messages of other queues are ignored). */
  queues: readonly string[];
  /** Releases buffered jobs (the release statement ends cancelled ones `cancelled`). */
  giveBack(executions: Execution[], reason: GiveBackReason): void;
  /** Of these held jobs, the lease keys of those whose cancel was requested. */
  cancelRequested(held: Execution[]): Promise<Set<string>>;
  /** Which of these queues are paused. */
  paused(queues: string[]): Promise<Set<string>>;
  /** A read let buffered jobs start: start them. */
  onChecked(): void;
  onError(error: SkiplockError): void;
}

/** Applies cancel requests and paused queues to one worker's executions. */
export class Cancellation {
  readonly #deps: CancellationDeps;
  readonly #reads: Coalesced;
  /** Job ids named by cancel messages since the last read. */
  #cancelIds = new Set<string>();
  /** A read of the buffered jobs' queues is wanted. */
  #pauseWanted = false;
  /** A read of the buffered jobs' queues is in flight. */
  #pauseReading = false;
  /** Monotonic time when the last successful read of paused queues was sent; every queue buffered then was running. */
  #pauseReadAt = Number.NEGATIVE_INFINITY;
  /** How long the last paused-state read took (ms): a slow database widens what counts as fresh. */
  #pauseRoundTripMs = 0;
  #failures = 0;
  #retryTimer: unknown;
  readonly #clock: Clock;

  /** @param clock - times the reads and their retries; the one `mayStart`'s `now` comes from. */
  constructor(deps: CancellationDeps, clock: Clock = systemClock) {
    this.#deps = deps;
    this.#clock = clock;
    this.#reads = new Coalesced(() => this.#read(), CONTROL_READ_INTERVAL_MS, clock);
  }

  /**
   * Takes a control message; returns true when it was one (cancel, pause)
   * and so wakes no claim. Resume and every other type are plain wake-ups.
   */
  onMessage(message: WakeUp): boolean {
    if (message.type === 'cancel') {
      if (message.ids && message.ids.length > 0) {
        const named = new Set(message.ids);
        let held = false;
        for (const e of this.#deps.executions.leased()) {
          if (named.has(e.id)) {
            this.#cancelIds.add(e.id);
            held = true;
          }
        }
        if (held) this.#reads.request();
      }
      return true;
    }
    if (message.type === 'pause') {
      const { queue } = message;
      if (queue !== null && this.#deps.queues.includes(queue) && this.#buffersQueue(queue)) {
        this.#pauseWanted = true;
        this.#reads.request();
      }
      return true;
    }
    return false;
  }

  /** The heartbeat found these held jobs' cancel requested. */
  onCancelRequested(held: readonly Execution[]): void {
    const keys = new Set(held.map(leaseKey));
    this.#cancel((e) => keys.has(leaseKey(e)));
  }

  /**
   * Whether the buffered job `e` may start at `now` (the clock's monotonic time):
   * yes when it was claimed recently, or a read sent recently found its queue
   * running. Otherwise asks for a read, after which `onChecked` is called.
   */
  mayStart(e: Execution, now: number): boolean {
    const freshMs = Math.max(PAUSE_RECHECK_MS, this.#pauseRoundTripMs * 1.5);
    if (now - e.claimedAt <= freshMs || now - this.#pauseReadAt <= freshMs) return true;
    if (!this.#pauseWanted && !this.#pauseReading) {
      this.#pauseWanted = true;
      this.#reads.request();
    }
    return false;
  }

  /** Reads no more; resolves when no read is in flight. */
  async stop(): Promise<void> {
    this.#clock.clearTimeout(this.#retryTimer);
    await this.#reads.stop();
  }

  #buffersQueue(queue: string): boolean {
    return this.#deps.executions.leased().some((e) => e.state === 'buffered' && e.job.queue === queue);
  }

  async #read(): Promise<void> {
    const ids = this.#cancelIds;
    this.#cancelIds = new Set();
    const held = ids.size > 0 ? this.#deps.executions.leased().filter((e) => ids.has(e.id)) : [];
    const pauseWanted = this.#pauseWanted;
    this.#pauseWanted = false;
    this.#pauseReading = pauseWanted;
    const queues = pauseWanted ? this.#bufferedQueues() : [];
    const sentAt = this.#clock.monotonic();
    const [cancelled, paused] = await Promise.allSettled([
      held.length > 0 ? this.#deps.cancelRequested(held) : new Set<string>(),
      queues.length > 0 ? this.#deps.paused(queues) : new Set<string>(),
    ]);
    this.#pauseReading = false;
    let failed = false;
    if (cancelled.status === 'fulfilled') {
      this.#cancel((e) => cancelled.value.has(leaseKey(e)));
    } else {
      failed = true;
      // Read again: the heartbeat would find them too, but later.
      for (const e of held) this.#cancelIds.add(e.id);
      this.#deps.onError(translateError(cancelled.reason));
    }
    if (pauseWanted) {
      if (paused.status === 'fulfilled') {
        this.#pauseReadAt = sentAt;
        this.#pauseRoundTripMs = this.#clock.monotonic() - sentAt;
        const queuesPaused = paused.value;
        if (queuesPaused.size > 0) {
          const taken = this.#deps.executions.takeBufferedWhere((e) => queuesPaused.has(e.job.queue));
          if (taken.length > 0) this.#deps.giveBack(taken, 'pause');
        }
      } else {
        failed = true;
        this.#pauseWanted = true;
        this.#deps.onError(translateError(paused.reason));
      }
    }
    if (failed) {
      // Buffered jobs wait for the read (or are given back after prefetchTimeoutMs); try again with backoff.
      this.#clock.clearTimeout(this.#retryTimer);
      this.#retryTimer = this.#clock.setTimeout(() => this.#reads.request(), loopBackoffMs(this.#failures++));
    } else {
      this.#failures = 0;
    }
    if (pauseWanted) this.#deps.onChecked();
  }

  #bufferedQueues(): string[] {
    const queues = new Set<string>();
    for (const e of this.#deps.executions.leased()) if (e.state === 'buffered') queues.add(e.job.queue);
    return [...queues];
  }

  #cancel(match: (e: Execution) => boolean): void {
    const buffered = this.#deps.executions.takeBufferedWhere(match);
    if (buffered.length > 0) this.#deps.giveBack(buffered, 'cancel');
    for (const e of this.#deps.executions.running()) {
      if (e.state === 'running' && match(e)) e.control?.abort(new CancelledError(e.id));
    }
  }
}
