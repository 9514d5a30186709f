/**
 * The claim loop: claims due jobs in batches (never more than the free slots)
 * whenever something may be waiting: a notification, the safety-net poll, the
 * earliest known `run_at` coming due, a slot freed after a full batch, or a
 * reconnection. Database errors are reported and retried with backoff.
 *
 * Notifications are hints (any role that can connect can send one): however
 * many arrive, at most one claim is in flight and one more follows it. A claim
 * woken only by hints that finds nothing makes the next such claim wait
 * {@link HINT_COOLDOWN_MS}, doubling while they keep finding nothing, up to
 * {@link HINT_COOLDOWN_MAX_MS}: a flood of wake-ups costs a few claims a
 * second. A claim that finds jobs ends the wait; the poll, freed slots and a
 * reconnection claim without it.
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
  /** `sentAt`: `performance.now()` when the claim was sent (its snapshot is no older). */
  dispatch(jobs: ClaimedJob[], sentAt: number): void;
  onError(error: SkiplockError): void;
}

/** Longest timer the fetcher sets for a future run_at; the poll covers the rest. */
const MAX_TIMER_MS = 2_147_483_647;

/** Most due times remembered; later ones are left to the poll. */
const MAX_DUE_TIMES = 1000;

/** Due times closer than this share one wake-up. */
const DUE_TIME_GRAIN_MS = 5;

/** How long the next hinted claim waits after one that found nothing (milliseconds). */
export const HINT_COOLDOWN_MS = 25;

/** Longest wait between hinted claims that keep finding nothing (milliseconds). */
export const HINT_COOLDOWN_MAX_MS = 100;

/** A known future due time: ms since epoch (this process's clock), and whether only a message announced it. */
interface DueTime {
  at: number;
  hinted: boolean;
}

/** The claim loop of one worker. */
export class Fetcher {
  readonly #deps: FetcherDeps;
  readonly #stopped = new AbortController();
  #wanted = true;
  /** The wanted claim has a cause other than hints (start, poll, slot, backlog, reconnection, error retry). */
  #trusted = true;
  /** Hinted claims in a row that found nothing. */
  #fruitless = 0;
  /** `Date.now()` before which a claim wanted only by hints waits. */
  #quietUntil = 0;
  /** The loop waits for {@link Fetcher.#quietUntil}: hints join that wait without waking it. */
  #cooling = false;
  #waiter: (() => void) | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  #dueTimer: NodeJS.Timeout | undefined;
  /** Known future due times, ascending. */
  #dueTimes: DueTime[] = [];
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
    this.#trusted = true;
    this.#resume();
  }

  /**
   * A message says jobs may be due now, or in `delayMs` (database clock).
   * Coalesced with other hints, and slowed while hinted claims find nothing
   * (see the module's comment).
   */
  hint(delayMs = 0): void {
    if (delayMs > 0) {
      this.#addDueTime(delayMs, true);
      return;
    }
    this.#wanted = true;
    if (!this.#cooling) this.#resume();
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
    this.#addDueTime(delayMs, false);
  }

  #addDueTime(delayMs: number, hinted: boolean): void {
    const at = Date.now() + Math.min(delayMs, MAX_TIMER_MS);
    const due = this.#dueTimes;
    // Times within a few milliseconds share one wake-up.
    const near = due.find((t) => Math.abs(t.at - at) <= DUE_TIME_GRAIN_MS);
    if (near) {
      near.hinted &&= hinted;
      return;
    }
    let index = due.findIndex((t) => t.at > at);
    if (index === -1) index = due.length;
    if (index >= MAX_DUE_TIMES) return; // the poll covers what does not fit
    due.splice(index, 0, { at, hinted });
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
        let hinted = true;
        while (this.#dueTimes.length > 0 && this.#dueTimes[0]!.at <= now + DUE_TIME_GRAIN_MS) {
          // Every due time is taken off, whatever the ones before it were.
          const due = this.#dueTimes.shift()!;
          hinted = hinted && due.hinted;
        }
        if (hinted) this.hint();
        else this.wake();
        this.#armDueTimer();
      },
      Math.max(0, next.at - Date.now()),
    );
    this.#dueTimer.unref();
  }

  /** A slot was freed: claim again if the last batch suggested more is waiting. */
  slotFreed(): void {
    this.#slotsFreed++;
    if (this.#retryOnSlot) {
      this.#retryOnSlot = false;
      this.#wanted = true;
      this.#trusted = true;
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
      const hinted = !this.#trusted;
      if (hinted) {
        // Hinted claims found nothing lately: this one waits (hints meanwhile join it).
        // (A clock set back does not make the wait longer.)
        this.#quietUntil = Math.min(this.#quietUntil, Date.now() + HINT_COOLDOWN_MAX_MS);
        const quiet = this.#quietUntil - Date.now();
        if (quiet > 0) {
          let timer: NodeJS.Timeout | undefined;
          this.#cooling = true;
          await new Promise<void>((resolve) => {
            this.#waiter = resolve;
            timer = setTimeout(resolve, quiet);
          });
          this.#cooling = false;
          clearTimeout(timer);
          continue;
        }
      }
      this.#wanted = false;
      this.#trusted = false;
      const slotsFreed = this.#slotsFreed;
      const sentAt = performance.now();
      let jobs: ClaimedJob[];
      try {
        jobs = await this.#deps.claim(limit);
        failures = 0;
        // A slot freed while the claim was in flight may not have counted yet.
        if (this.#retryOnSlot && this.#slotsFreed !== slotsFreed) {
          this.#retryOnSlot = false;
          this.#wanted = true;
          this.#trusted = true;
        }
      } catch (error) {
        this.#deps.onError(translateError(error));
        this.#wanted = true;
        this.#trusted = true;
        await sleep(loopBackoffMs(failures++), undefined, { signal: this.#stopped.signal }).catch(() => {});
        continue;
      }
      if (jobs.length > 0) this.#fruitless = 0;
      else if (hinted) {
        this.#quietUntil =
          Date.now() + Math.min(HINT_COOLDOWN_MAX_MS, HINT_COOLDOWN_MS * 2 ** this.#fruitless);
        this.#fruitless = Math.min(this.#fruitless + 1, 10);
      }
      // A full batch means more may be waiting: claim again as soon as slots allow.
      this.#backlog = jobs.length === limit;
      if (this.#backlog) {
        this.#wanted = true;
        this.#trusted = true;
      }
      if (jobs.length > 0) this.#deps.dispatch(jobs, sentAt);
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
