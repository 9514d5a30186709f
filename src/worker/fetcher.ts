/**
 * The claim loop: claims due jobs in batches (never more than the free slots)
 * whenever something may be waiting: a notification, the safety-net poll, the
 * earliest known `run_at` coming due, a slot freed after a full batch, or a
 * reconnection. Database errors are reported and retried with backoff.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { translateError } from '../db/executor.js';
import type { ClaimedJob } from '../db/queries/claim.js';
import type { SkiplockError } from '../errors.js';
import { loopBackoffMs } from './loop-backoff.js';

/** What the fetcher needs from its worker. */
export interface FetcherDeps {
  pollIntervalMs: number;
  /** How many jobs to claim now (0: wait for a slot or a wake-up). */
  claimLimit(): number;
  claim(limit: number): Promise<ClaimedJob[]>;
  dispatch(jobs: ClaimedJob[]): void;
  onError(error: SkiplockError): void;
}

/** Longest timer the fetcher sets for a future run_at; the poll covers the rest. */
const MAX_TIMER_MS = 2_147_483_647;

/** Most due times remembered; later ones are left to the poll. */
const MAX_DUE_TIMES = 1000;

/** Due times closer than this share one wake-up. */
const DUE_TIME_GRAIN_MS = 5;

/** The claim loop of one worker. */
export class Fetcher {
  readonly #deps: FetcherDeps;
  readonly #stopped = new AbortController();
  #wanted = true;
  #waiter: (() => void) | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  #dueTimer: NodeJS.Timeout | undefined;
  /** Known future due times (ms since epoch, this process's clock), ascending. */
  #dueTimes: number[] = [];
  #loop: Promise<void> | undefined;
  #backlog = false;
  /** A limited queue had more jobs than this worker got: claim again when a slot frees. */
  #retryOnSlot = false;
  /** Slots freed so far (so that one freed during a claim is not missed). */
  #slotsFreed = 0;

  constructor(deps: FetcherDeps) {
    this.#deps = deps;
  }

  start(): void {
    this.#pollTimer = setInterval(() => this.wake(), this.#deps.pollIntervalMs);
    this.#pollTimer.unref();
    this.#loop = this.#run();
  }

  /** Something may be due now. */
  wake(): void {
    this.#wanted = true;
    this.#resume();
  }

  /**
   * Something becomes due in `delayMs` (database clock): wake then. Every due
   * time is kept (up to {@link MAX_DUE_TIMES}), so a later one is not lost
   * behind an earlier one; one timer is armed for the earliest.
   */
  wakeAfter(delayMs: number): void {
    if (delayMs <= 0) {
      this.wake();
      return;
    }
    const at = Date.now() + Math.min(delayMs, MAX_TIMER_MS);
    const due = this.#dueTimes;
    // Times within a few milliseconds share one wake-up.
    if (due.some((t) => Math.abs(t - at) <= DUE_TIME_GRAIN_MS)) return;
    let index = due.findIndex((t) => t > at);
    if (index === -1) index = due.length;
    if (index >= MAX_DUE_TIMES) return; // the poll covers what does not fit
    due.splice(index, 0, at);
    if (due.length > MAX_DUE_TIMES) due.pop();
    if (index === 0) this.#armDueTimer();
  }

  #armDueTimer(): void {
    clearTimeout(this.#dueTimer);
    const next = this.#dueTimes[0];
    if (next === undefined || this.#stopped.signal.aborted) return;
    this.#dueTimer = setTimeout(
      () => {
        const now = Date.now();
        while (this.#dueTimes.length > 0 && this.#dueTimes[0]! <= now + DUE_TIME_GRAIN_MS)
          this.#dueTimes.shift();
        this.wake();
        this.#armDueTimer();
      },
      Math.max(0, next - Date.now()),
    );
    this.#dueTimer.unref();
  }

  /** A slot was freed: claim again if the last batch suggested more is waiting. */
  slotFreed(): void {
    this.#slotsFreed++;
    if (this.#retryOnSlot) {
      this.#retryOnSlot = false;
      this.#wanted = true;
    }
    if (this.#wanted) this.#resume();
  }

  /** A limited queue holds jobs this worker could not take yet: claim again once a slot frees here. */
  retryOnSlotFreed(): void {
    this.#retryOnSlot = true;
  }

  #resume(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (!this.#stopped.signal.aborted) {
      const limit = this.#wanted ? this.#deps.claimLimit() : 0;
      if (limit === 0) {
        await new Promise<void>((resolve) => {
          this.#waiter = resolve;
        });
        // Let handlers that settle in this turn free their slots, so one claim takes them all.
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      this.#wanted = false;
      const slotsFreed = this.#slotsFreed;
      let jobs: ClaimedJob[];
      try {
        jobs = await this.#deps.claim(limit);
        failures = 0;
        // A slot freed while the claim was in flight may not have counted yet.
        if (this.#retryOnSlot && this.#slotsFreed !== slotsFreed) {
          this.#retryOnSlot = false;
          this.#wanted = true;
        }
      } catch (error) {
        this.#deps.onError(translateError(error));
        this.#wanted = true;
        await sleep(loopBackoffMs(failures++), undefined, { signal: this.#stopped.signal }).catch(() => {});
        continue;
      }
      // A full batch means more may be waiting: claim again as soon as slots allow.
      this.#backlog = jobs.length === limit;
      if (this.#backlog) this.#wanted = true;
      if (jobs.length > 0) this.#deps.dispatch(jobs);
    }
  }

  /** Stops claiming; resolves when no claim is in flight. */
  async stop(): Promise<void> {
    this.#stopped.abort();
    clearInterval(this.#pollTimer);
    clearTimeout(this.#dueTimer);
    this.#resume();
    await this.#loop;
  }

  /** Whether a claim returned as many jobs as asked the last time: more may be waiting. */
  get backlog(): boolean {
    return this.#backlog;
  }
}
