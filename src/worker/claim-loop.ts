/**
 * The claim loop of one worker: when to claim, how many jobs, and with which
 * statement. It is one loop ({@link ClaimLoop.run}) with at most one claim or
 * read of limits in flight, waiting with {@link Service.wait} on the injected
 * clock between them.
 *
 * Modes ({@link ClaimLoop.mode}):
 *
 * - `idle`: nothing is wanted, or no slot is free. Waits for a wake-up, or the
 *   next poll or due time, whichever comes first.
 * - `claiming`: claims for the free slots.
 * - `prefetching`: the last claim came back full (a backlog waits), so the
 *   claim also fills a buffer of jobs to start as slots free. The buffer is
 *   sized by the handlers' recent run times so that buffered jobs should start
 *   within {@link PREFETCH_HORIZON_MS}: fast jobs come many per round trip,
 *   slow jobs are not held back from other workers.
 * - `cooling`: the claim is wanted only by messages, and the last two or more
 *   such claims in a row found nothing: it waits {@link HINT_COOLDOWN_MS},
 *   doubling while they keep finding nothing, up to {@link HINT_COOLDOWN_MAX_MS}.
 *   Messages meanwhile join the wait; any other wake-up ends it. A claim that
 *   finds jobs resets it. The first such claim to find nothing costs no wait:
 *   it often comes of a message that arrived while the claim before it was in
 *   flight and took the job, and the next job's message must not wait for it.
 * - `reading-limits`: reads which of the worker's queues have a concurrency or
 *   rate limit (at start, every poll, after a `limits` message; at most one
 *   read every {@link CONTROL_READ_INTERVAL_MS}, so a flood of messages costs
 *   a bounded rate of reads). A read runs between claims, never beside one:
 *   once allowed, it comes before the next claim.
 * - `backing-off`: a claim failed (database unreachable, restarting): the
 *   error is reported, and the loop waits ({@link loopBackoffMs}) ignoring
 *   wake-ups, then claims again.
 * - `stopped`: after `stop()`, which resolves once a claim in flight returned
 *   (its jobs are still handed over; the worker gives them back).
 *
 * What wakes it: a message on the wake-up channel ({@link ClaimLoop.hint};
 * any role can send one, so it is only a hint), the poll every
 * `pollIntervalMs` (the safety net of a lost message), a known future due time
 * (a retry's backoff, a message's `delayMs`, a rate limit's window: up to
 * {@link MAX_DUE_TIMES} are remembered, one wake-up for those within a few
 * milliseconds, at the latest of them, never before), a slot freed after a
 * full claim, and a reconnection of the listener ({@link ClaimLoop.wake}).
 * However many arrive during a claim, one more claim follows it.
 *
 * How many jobs a claim asks for: the free slots, plus while prefetching the
 * buffer, topped up once half empty by a buffer's worth (so it holds up to one
 * and a half buffers; handlers that wait on I/O run the half left while the
 * claim is on its way), never more than `batchSize`, in one
 * statement (two at once, each skipping the rows the other locked, cost the
 * server more per job than they saved in waiting). Nothing while
 * every slot is busy and no handler started within the horizon (the handlers
 * are slow: the jobs are left to other workers), nor while results lag behind.
 * Queues without limits are claimed in one ordinary claim; each limited queue
 * through the limited claim, for free slots only (a held job counts against
 * its limit, so it is never prefetched), taking turns at the free slots;
 * except a queue whose only limit is a group concurrency, which the claim
 * says may be prefetched like a queue without limits. While
 * a limited queue waits for a slot here, the other queues are not prefetched,
 * so that slots free up for it.
 */
import type pg from 'pg';
import { translateError } from '../db/executor.js';
import type { ClaimedJob, ClaimRequest } from '../db/queries/claim.js';
import type { LimitedClaim } from '../db/queries/claim-limited.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { SkiplockError } from '../errors.js';
import { type Clock, MAX_TIMER_MS } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';
import { CONTROL_READ_INTERVAL_MS } from './coalesced.js';
import { kindMaxAttemptsOf } from './handler-definition.js';
import { loopBackoffMs, SizeCap } from './loop-backoff.js';
import type { ResolvedWorkerOptions } from './options.js';

/** Buffered jobs should start within this many milliseconds, judged by recent run times. */
export const PREFETCH_HORIZON_MS = 100;

/** How long the next hinted claim waits after one that found nothing (milliseconds). */
export const HINT_COOLDOWN_MS = 25;

/** Longest wait between hinted claims that keep finding nothing (milliseconds). */
export const HINT_COOLDOWN_MAX_MS = 100;

/** Most due times remembered; later ones are left to the poll. */
export const MAX_DUE_TIMES = 1000;

/** Due times closer than this share one wake-up (milliseconds). */
const DUE_TIME_GRAIN_MS = 5;

/** Where the claim loop is; see the module's comment. */
export type ClaimMode =
  | 'idle'
  | 'claiming'
  | 'prefetching'
  | 'cooling'
  | 'reading-limits'
  | 'backing-off'
  | 'stopped';

/** The jobs a worker holds when it may claim. */
export interface HeldJobs {
  /** Handlers running now. */
  running: number;
  /** Jobs claimed and not started yet. */
  buffered: number;
  /** Finished jobs whose results are not written yet. */
  unwritten: number;
}

/** The claim request of a worker without its queues and limit. */
export type ClaimRequestBase = Omit<ClaimRequest, 'queues' | 'limit'>;

/** The statements the claim loop sends (a worker's {@link JobQueries} has them). */
export interface ClaimStatements {
  claim: Pick<JobQueries['claim'], 'claim'>;
  limitedClaim: Pick<JobQueries['limitedClaim'], 'claim'>;
  queueLimits: Pick<JobQueries['queueLimits'], 'limited'>;
}

/** What the claim loop is given by its worker, once. */
export interface ClaimLoopOptions {
  pool: pg.Pool;
  queries: ClaimStatements;
  request: ClaimRequestBase;
  /** The worker's queues. */
  queues: readonly string[];
  /** Time between polls, and between reads of the queues' limits (milliseconds). */
  pollIntervalMs: number;
  /** Slots: handlers run side by side. */
  concurrency: number;
  /** Most jobs buffered beyond the slots while a backlog waits (0: none). */
  prefetch: number;
  /** Most jobs one claim asks for. */
  batchSize: number;
}

/** The one seam between a worker and its claim loop. */
export interface ClaimLoopHost {
  /** What the worker holds now; null when it does not take jobs (not running). */
  held(): HeldJobs | null;
  /**
   * Takes claimed jobs (also after `stop()`: the worker gives those back).
   * `sentAt`: the clock's monotonic time when their claim was sent.
   */
  dispatch(jobs: ClaimedJob[], sentAt: number): void;
  /** `queue` became limited: the worker gives back the jobs of it it buffered. */
  onLimited(queue: string): void;
  onError(error: SkiplockError): void;
}

/** The claim request of a worker's options (without queues and limit): its kinds, kinds' maxAttempts, lease. */
export function workerClaimRequest(
  options: ResolvedWorkerOptions,
  workerId: string,
  traced: boolean,
): ClaimRequestBase {
  return {
    kinds: [...options.handlers.keys()],
    workerId,
    visibilityTimeoutMs: options.visibilityTimeoutMs,
    named: { on: options.preparedStatements },
    kindMaxAttempts: kindMaxAttemptsOf(options.handlers),
    traceContext: traced,
  };
}

/**
 * A known future due time: the clock's monotonic time, and whether only a
 * message announced it. Times spanning at most {@link DUE_TIME_GRAIN_MS}
 * share it, from the earliest (`from`) to the latest (`at`), and it comes at
 * the latest, so that none is claimed before it is due.
 */
interface DueTime {
  at: number;
  from: number;
  hinted: boolean;
}

/** The claim loop of one worker (see the module's comment). */
export class ClaimLoop extends Service {
  readonly #options: ClaimLoopOptions;
  readonly #host: ClaimLoopHost;
  #mode: ClaimMode = 'idle';

  /** A claim is wanted. */
  #wanted = true;
  /** The wanted claim has a cause other than messages (start, poll, slot, backlog, reconnection, error). */
  #trusted = true;
  /** Hinted claims in a row that found nothing. */
  #fruitless = 0;
  /** Monotonic time before which a claim wanted only by messages waits. */
  #quietUntil = Number.NEGATIVE_INFINITY;
  /** Monotonic time of the next poll. */
  #nextPollAt = 0;
  /** Known future due times, ascending. */
  #dueTimes: DueTime[] = [];
  /** The last claim came back full: more jobs may be waiting. */
  #backlog = false;
  /** A limited queue had more jobs than this worker got: claim again when a slot frees. */
  #retryOnSlot = false;
  /** Slots freed so far (so that one freed during a claim is not missed). */
  #slotsFreed = 0;

  /** Limited queues, read from the database. */
  #limited: string[] = [];
  #unlimited: readonly string[];
  /** The limited queue tried first by the next claim, so each gets its turn at free slots. */
  #turn = 0;
  /**
   * Limited queues that may hold due jobs: their last claim took all it could
   * (by its limits or this worker's free slots), or a wake-up or poll came for
   * them since.
   */
  readonly #short = new Set<string>();
  /** Limited queues whose last claim said they may be claimed ahead of the free slots. */
  readonly #prefetchable = new Set<string>();
  /** A read of limits is wanted; `#limitsHint`: a message asked for it (claim after it). */
  #limitsWanted = false;
  #limitsHint = false;
  #lastLimitsReadAt = Number.NEGATIVE_INFINITY;

  /** Moving average of handler run times (ms); infinite until one finished. */
  #averageRunMs = Number.POSITIVE_INFINITY;
  /** Monotonic time when a handler last started. */
  #lastStartAt = Number.NEGATIVE_INFINITY;
  /**
   * The most jobs one claim statement may ask for, after such statements
   * timed out: one cap for the ordinary claim, one per limited queue, so
   * that a slow statement of one queue does not shrink the others' claims.
   */
  readonly #sizeCap: SizeCap;
  readonly #limitedSizeCaps = new Map<string, SizeCap>();

  /** @param clock - defaults to the process's clock. */
  constructor(options: ClaimLoopOptions, host: ClaimLoopHost, clock?: Clock) {
    super(clock);
    this.#options = options;
    this.#host = host;
    this.#sizeCap = new SizeCap(this.clock, options.batchSize);
    this.#unlimited = options.queues;
  }

  /** Where the loop is now. */
  get mode(): ClaimMode {
    return this.state === 'stopped' ? 'stopped' : this.#mode;
  }

  /** Whether the last claim came back full: more jobs may be waiting. */
  get backlog(): boolean {
    return this.#backlog;
  }

  // --- What wakes the loop -------------------------------------------------

  /** Something may be due now (start, a reconnection): claim, without cooling down. */
  override wake(): void {
    this.#wanted = true;
    this.#trusted = true;
    super.wake();
  }

  /**
   * A message says jobs may be due now, or in `delayMs` (database clock).
   * Coalesced with other hints, and cooled down while hinted claims find nothing.
   */
  hint(delayMs = 0): void {
    if (delayMs > 0) {
      this.#addDueTime(delayMs, true);
      return;
    }
    this.#wanted = true;
    if (this.#mode !== 'cooling') super.wake();
  }

  /**
   * Something becomes due in `delayMs` (database clock): claim then. Every
   * due time is kept (up to {@link MAX_DUE_TIMES}), so a later one is not lost
   * behind an earlier one.
   */
  wakeAfter(delayMs: number): void {
    if (delayMs <= 0) this.wake();
    else this.#addDueTime(delayMs, false);
  }

  /** A slot was freed: claim again if the last claim suggested more is waiting. */
  slotFreed(): void {
    this.#slotsFreed++;
    if (this.#retryOnSlot) {
      this.#retryOnSlot = false;
      this.#wanted = true;
      this.#trusted = true;
    }
    if (this.#wanted && (this.#trusted || this.#mode !== 'cooling')) super.wake();
  }

  /** A `limits` message: re-read limits if it concerns one of the worker's queues, then claim. */
  onLimitsMessage(queue: string | null): void {
    if (queue !== null && !this.#options.queues.includes(queue)) return;
    this.#limitsWanted = true;
    this.#limitsHint = true;
    super.wake();
  }

  /** A wake-up for `queue` (null: any queue): its jobs may wait for this worker's slots. */
  onWakeUp(queue: string | null): void {
    if (this.#limited.length === 0) return;
    if (queue === null) for (const q of this.#limited) this.#short.add(q);
    else if (this.#limited.includes(queue)) this.#short.add(queue);
  }

  // --- Run times, for the prefetch buffer ----------------------------------

  /** A handler started now. */
  jobStarted(): void {
    this.#lastStartAt = this.clock.monotonic();
  }

  /** A handler ran for `runMs` milliseconds. */
  jobFinished(runMs: number): void {
    this.#averageRunMs =
      this.#averageRunMs === Number.POSITIVE_INFINITY ? runMs : this.#averageRunMs * 0.9 + runMs * 0.1;
  }

  /**
   * How many buffered jobs are worth keeping: those the handlers should start
   * within the horizon by their recent run times, twice over, plus a slot's
   * worth. Beyond it, jobs claimed while handlers were fast wait behind slow
   * ones that other workers could run: the worker gives the newest back.
   * Infinite until a handler finished.
   */
  bufferLimit(): number {
    if (this.#averageRunMs === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    return 2 * this.#aheadLimit() + this.#options.concurrency;
  }

  /** Jobs worth buffering ahead of the slots, by the handlers' recent run times (at most `prefetch`). */
  #aheadLimit(): number {
    const { concurrency, prefetch } = this.#options;
    return Math.min(
      prefetch,
      Math.floor((concurrency * PREFETCH_HORIZON_MS) / Math.max(this.#averageRunMs, 0.001)),
    );
  }

  /** How many jobs to claim now; 0 means wait for a slot or a wake-up. */
  #claimLimit(now: number): number {
    const held = this.#host.held();
    if (held === null) return 0;
    const { concurrency, prefetch, batchSize } = this.#options;
    const ahead = this.#backlog ? this.#aheadLimit() : 0;
    const room = concurrency + ahead - held.running - held.buffered;
    if (room <= 0) return 0;
    // Results lag behind (a slow database): claim no more until they catch up.
    if (held.unwritten > 2 * (concurrency + prefetch)) return 0;
    // Every slot busy and nothing started lately: handlers are slow now; leave the jobs to others.
    if (held.running >= concurrency && now - this.#lastStartAt > PREFETCH_HORIZON_MS) return 0;
    const cap = Math.min(batchSize, this.#limited.length === 0 ? this.#sizeCap.value : batchSize);
    // Top the buffer up once it is half empty, by a buffer's worth, so that each claim takes a
    // worthwhile batch.
    if (ahead > 0 && held.buffered * 2 <= ahead) return Math.min(cap, room + Math.floor(ahead / 2));
    if (held.buffered === 0 && held.running < concurrency) return Math.min(cap, room);
    return 0;
  }

  // --- The loop -------------------------------------------------------------

  /**
   * Reads which queues are limited (the worker's start calls it before
   * `start()`, so that a database it cannot read fails the start).
   *
   * @throws {DatabaseError} from the database.
   */
  async readLimits(): Promise<void> {
    this.#lastLimitsReadAt = this.clock.monotonic();
    const queues = this.#options.queues;
    const limited = await this.#options.queries.queueLimits.limited(this.#options.pool, queues);
    const before = new Set(this.#limited);
    this.#limited = limited;
    const now = new Set(limited);
    this.#unlimited = queues.filter((q) => !now.has(q));
    for (const queue of this.#limitedSizeCaps.keys())
      if (!now.has(queue)) this.#limitedSizeCaps.delete(queue);
    for (const queue of limited) {
      this.#short.add(queue);
      if (!before.has(queue)) this.#host.onLimited(queue);
    }
  }

  protected async run(): Promise<void> {
    this.#nextPollAt = this.clock.monotonic() + this.#options.pollIntervalMs;
    let failures = 0;
    while (!this.stopped) {
      const now = this.clock.monotonic();
      this.#takeTimers(now);
      if (this.#limitsWanted && now >= this.#lastLimitsReadAt + CONTROL_READ_INTERVAL_MS) {
        await this.#readLimitsInLoop();
        continue;
      }
      const limit = this.#wanted ? this.#claimLimit(now) : 0;
      if (limit === 0) {
        this.#mode = 'idle';
        const why = await this.wait(this.#untilNextTimer(now));
        // Let handlers that settle in this turn free their slots, so one claim takes them all;
        // but a buffer's top-up is decided in the turn it falls to half, not a turn later.
        const prefetching = this.#backlog && this.#aheadLimit() > 0;
        if (why === 'woken' && !prefetching) await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      if (!this.#trusted && this.#quietUntil > now) {
        // Hinted claims found nothing lately: this one waits (hints meanwhile join it).
        this.#mode = 'cooling';
        await this.wait(Math.min(this.#quietUntil - now, this.#untilNextTimer(now)));
        continue;
      }
      if (await this.#claim(limit)) failures = 0;
      else await this.#backOff(loopBackoffMs(failures++));
    }
  }

  /** One claim of up to `limit` jobs, handed to the worker; false when it failed (reported). */
  async #claim(limit: number): Promise<boolean> {
    const hinted = !this.#trusted;
    this.#mode = this.#backlog ? 'prefetching' : 'claiming';
    this.#wanted = false;
    this.#trusted = false;
    const slotsFreed = this.#slotsFreed;
    const sentAt = this.clock.monotonic();
    let jobs: ClaimedJob[];
    try {
      jobs = await this.#claimJobs(limit);
    } catch (error) {
      this.#host.onError(translateError(error));
      this.#wanted = true;
      this.#trusted = true;
      return false;
    }
    // A slot freed while the claim was in flight may not have counted yet.
    if (this.#retryOnSlot && this.#slotsFreed !== slotsFreed) {
      this.#retryOnSlot = false;
      this.#wanted = true;
      this.#trusted = true;
    }
    if (jobs.length > 0) {
      this.#fruitless = 0;
      this.#quietUntil = Number.NEGATIVE_INFINITY;
    } else if (hinted) {
      if (this.#fruitless > 0) {
        this.#quietUntil =
          this.clock.monotonic() +
          Math.min(HINT_COOLDOWN_MAX_MS, HINT_COOLDOWN_MS * 2 ** (this.#fruitless - 1));
      }
      this.#fruitless = Math.min(this.#fruitless + 1, 10);
    }
    // A full claim means more may be waiting: claim again as soon as slots allow.
    this.#backlog = jobs.length === limit;
    if (this.#backlog) {
      this.#wanted = true;
      this.#trusted = true;
    }
    if (jobs.length > 0) this.#host.dispatch(jobs, sentAt);
    return true;
  }

  /** Waits `delayMs` after a failed claim; wake-ups do not end it, `stop()` does. */
  async #backOff(delayMs: number): Promise<void> {
    this.#mode = 'backing-off';
    const until = this.clock.monotonic() + delayMs;
    for (let left = delayMs; left > 0 && !this.stopped; left = until - this.clock.monotonic()) {
      await this.wait(left);
    }
  }

  async #readLimitsInLoop(): Promise<void> {
    this.#mode = 'reading-limits';
    const hint = this.#limitsHint;
    this.#limitsWanted = false;
    this.#limitsHint = false;
    try {
      await this.readLimits();
    } catch (error) {
      this.#host.onError(translateError(error));
    }
    if (hint) this.#wanted = true;
  }

  /** Takes off the poll and the due times that came due, wanting a claim for them. */
  #takeTimers(now: number): void {
    if (now >= this.#nextPollAt) {
      this.#wanted = true;
      this.#trusted = true;
      this.#limitsWanted = true;
      this.#nextPollAt += this.#options.pollIntervalMs;
      if (this.#nextPollAt <= now) this.#nextPollAt = now + this.#options.pollIntervalMs;
    }
    const due = this.#dueTimes;
    // Never ahead of time: a claim sent before its jobs are due finds nothing, and nothing would
    // claim them before the poll (a timer may fire up to a millisecond early).
    if (due.length === 0 || due[0]!.at > now) return;
    let hinted = true;
    // Every due time is taken off, whatever the ones before it were: none is left to spin on.
    while (due.length > 0 && due[0]!.at <= now) hinted = due.shift()!.hinted && hinted;
    this.#wanted = true;
    if (!hinted) this.#trusted = true;
  }

  /** Milliseconds until the next poll, due time or allowed read of limits. */
  #untilNextTimer(now: number): number {
    let next = this.#nextPollAt;
    const due = this.#dueTimes[0];
    if (due !== undefined && due.at < next) next = due.at;
    if (this.#limitsWanted) next = Math.min(next, this.#lastLimitsReadAt + CONTROL_READ_INTERVAL_MS);
    // Whole milliseconds, rounded up: the timers' own unit, so a timer does not end just short of it.
    return next > now ? Math.ceil(next - now) : 0;
  }

  #addDueTime(delayMs: number, hinted: boolean): void {
    let at = this.clock.monotonic() + Math.min(delayMs, MAX_TIMER_MS);
    let from = at;
    const due = this.#dueTimes;
    // Times within a few milliseconds share one wake-up, at the latest of them; the times one
    // wake-up stands for span at most that, so none waits longer for the others.
    const nearIndex = due.findIndex((t) => Math.max(t.at, at) - Math.min(t.from, at) <= DUE_TIME_GRAIN_MS);
    if (nearIndex !== -1) {
      const near = due[nearIndex]!;
      if (near.at >= at && near.from <= at) {
        near.hinted &&= hinted;
        return;
      }
      due.splice(nearIndex, 1);
      at = Math.max(at, near.at);
      from = Math.min(from, near.from);
      hinted = near.hinted && hinted;
    }
    let index = due.findIndex((t) => t.at > at);
    if (index === -1) index = due.length;
    if (index >= MAX_DUE_TIMES) return; // the poll covers what does not fit
    due.splice(index, 0, { at, from, hinted });
    if (due.length > MAX_DUE_TIMES) due.pop();
    // A new earliest time: the wait in progress ends and is armed again for it.
    if (index === 0 && (this.#mode === 'idle' || this.#mode === 'cooling')) super.wake();
  }

  // --- The claim statements ----------------------------------------------

  /**
   * Claims up to `limit` jobs: limited queues first, for free slots only, then
   * the unlimited queues for the rest.
   *
   * @throws {DatabaseError} when the first claim fails (jobs claimed before a
   *   later failure are returned, and the failure is reported).
   */
  async #claimJobs(limit: number): Promise<ClaimedJob[]> {
    const limited = this.#limited;
    if (limited.length === 0) return this.#claimUnlimited(limit);
    const jobs: ClaimedJob[] = [];
    try {
      const held = this.#host.held();
      const freeSlots = held ? this.#options.concurrency - held.running - held.buffered : 0;
      let free = Math.min(limit, freeSlots);
      let starved = false;
      const first = this.#turn++ % limited.length;
      for (let i = 0; i < limited.length; i++) {
        const queue = limited[(first + i) % limited.length]!;
        // A queue limited only per key is claimed like an unlimited one, ahead of the free slots.
        const sizeCap = this.#limitedSizeCap(queue);
        const wanted = Math.min(
          sizeCap.value,
          this.#prefetchable.has(queue) ? limit - jobs.length : Math.min(free, limit - jobs.length),
        );
        if (wanted <= 0) {
          this.#retryOnSlot = true;
          if (this.#short.has(queue)) starved = true;
          continue;
        }
        const claim = await sizeCap.watch(
          wanted,
          this.#options.queries.limitedClaim.claim(this.#options.pool, {
            ...this.#options.request,
            queues: [queue],
            limit: wanted,
          }),
        );
        if (claim.prefetchable) this.#prefetchable.add(queue);
        else this.#prefetchable.delete(queue);
        if (this.#afterLimitedClaim(queue, claim, wanted)) starved = true;
        for (const job of claim.jobs) jobs.push(job);
        free -= claim.jobs.length;
      }
      // A limited queue waits for this worker's slots: no prefetch for the others meanwhile.
      const rest = Math.min(
        this.#sizeCap.value,
        starved ? Math.min(limit - jobs.length, Math.max(0, free)) : limit - jobs.length,
      );
      if (rest > 0) for (const job of await this.#claimUnlimited(rest)) jobs.push(job);
    } catch (error) {
      if (jobs.length === 0) throw error;
      // The jobs are claimed: run them; the next slot, wake-up or poll claims again.
      this.#host.onError(translateError(error));
    }
    return jobs;
  }

  #limitedSizeCap(queue: string): SizeCap {
    let sizeCap = this.#limitedSizeCaps.get(queue);
    if (!sizeCap) {
      sizeCap = new SizeCap(this.clock, this.#options.batchSize);
      this.#limitedSizeCaps.set(queue, sizeCap);
    }
    return sizeCap;
  }

  #claimUnlimited(limit: number): Promise<ClaimedJob[]> {
    const queues = this.#unlimited;
    if (queues.length === 0) return Promise.resolve([]);
    return this.#sizeCap.watch(
      limit,
      this.#options.queries.claim.claim(this.#options.pool, { ...this.#options.request, queues, limit }),
    );
  }

  /**
   * Schedules the next claim of a queue whose limits or this worker's free
   * slots, not its jobs, ended this one, and keeps it among the waiting
   * queues then. Returns true when the free slots ended it.
   */
  #afterLimitedClaim(queue: string, claim: LimitedClaim, requested: number): boolean {
    const claimed = claim.jobs.length;
    const byLimits = Math.min(claim.concurrencyRoom ?? requested + 1, claim.rateRoom ?? requested + 1);
    // Fewer than allowed: the queue had no more due jobs; the insert wake-up
    // brings the next. Unless a group key's limit held some back: a freed slot may start them.
    if (claimed < Math.min(requested, byLimits) && !claim.groupHeld) {
      this.#short.delete(queue);
      return false;
    }
    this.#short.add(queue);
    this.#retryOnSlot = true;
    if (claim.rateRoom !== null && claimed >= claim.rateRoom && claim.rateWaitMs !== null)
      this.wakeAfter(claim.rateWaitMs + 1);
    // A key held by its group rate may start once its oldest counted start expires.
    if (claim.groupRateWaitMs !== null) this.wakeAfter(claim.groupRateWaitMs + 1);
    return byLimits > requested;
  }
}
