/**
 * Routes a worker's claims by queue. Queues without limits are claimed with
 * the ordinary claim statement, all in one, as if limits did not exist.
 * Limited queues (a concurrency or rate limit) are claimed one by one through
 * the limited claim, and only for the worker's free slots: a limited queue's
 * jobs are never prefetched, since a held job counts against the limit.
 *
 * Which queues are limited is read at start, again when a `limits` message
 * arrives, and on every poll interval (the safety net of a lost message).
 * Messages are hints: reads they cause run one at a time, at most one every
 * {@link CONTROL_READ_INTERVAL_MS}, however many arrive.
 */
import type pg from 'pg';
import { translateError } from '../db/executor.js';
import type { ClaimedJob, ClaimRequest } from '../db/queries/claim.js';
import type { LimitedClaim } from '../db/queries/claim-limited.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { SkiplockError } from '../errors.js';
import { CONTROL_READ_INTERVAL_MS, Coalesced } from './coalesced.js';
import type { Fetcher } from './fetcher.js';
import { kindMaxAttemptsOf } from './handler-definition.js';
import type { ResolvedWorkerOptions } from './options.js';

/** What the claimer needs from its worker. */
export interface ClaimerDeps {
  pool: pg.Pool;
  queries: JobQueries;
  /** The claim request without its queues and limit. */
  request: Omit<ClaimRequest, 'queues' | 'limit'>;
  /** The worker's queues. */
  queues: readonly string[];
  /** How often limits are re-read. */
  pollIntervalMs: number;
  /** Slots of the worker neither running nor holding a buffered job. */
  freeSlots(): number;
  /**
   * The worker's fetcher: `retryOnSlotFreed` when a limited queue may hold jobs
   * this worker could not take yet, `wakeAfter` when the rate allows more
   * starts, `hint` to claim again after a `limits` message.
   */
  fetcher(): Pick<Fetcher, 'retryOnSlotFreed' | 'wakeAfter' | 'hint'>;
  /** `queue` became limited: jobs of it this worker buffered must be given back. */
  onLimited(queue: string): void;
  onError(error: SkiplockError): void;
}

/** The claim request of a worker's options (without queues and limit): its kinds, kinds' maxAttempts, lease. */
export function workerClaimRequest(
  options: ResolvedWorkerOptions,
  workerId: string,
  traced: boolean,
): ClaimerDeps['request'] {
  return {
    kinds: [...options.handlers.keys()],
    workerId,
    visibilityTimeoutMs: options.visibilityTimeoutMs,
    prepared: options.preparedStatements,
    kindMaxAttempts: kindMaxAttemptsOf(options.handlers),
    traceContext: traced,
  };
}

/** The claim of one worker, across limited and unlimited queues. */
export class Claimer {
  readonly #deps: ClaimerDeps;
  #limited: string[] = [];
  #unlimited: readonly string[];
  /** The limited queue tried first by the next claim, so each gets its turn at free slots. */
  #turn = 0;
  /**
   * Limited queues that may hold due jobs: their last claim took all it could
   * (by its limits or this worker's free slots), or a wake-up or poll came for
   * them since. While one finds no free slot here, unlimited queues are
   * claimed without prefetch, so that slots free up for it.
   */
  readonly #short = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  readonly #refreshes: Coalesced;
  /** A `limits` message came: claim after the next read. */
  #wakeAfterRefresh = false;

  constructor(deps: ClaimerDeps) {
    this.#deps = deps;
    this.#unlimited = deps.queues;
    this.#refreshes = new Coalesced(async () => {
      const wake = this.#wakeAfterRefresh;
      this.#wakeAfterRefresh = false;
      try {
        await this.refresh();
      } catch (error) {
        this.#deps.onError(translateError(error));
      }
      if (wake) this.#deps.fetcher().hint();
    }, CONTROL_READ_INTERVAL_MS);
  }

  /** Reads which queues are limited. @throws {DatabaseError} from the database. */
  async refresh(): Promise<void> {
    const limited = await this.#deps.queries.queueLimits.limited(this.#deps.pool, this.#deps.queues);
    const before = new Set(this.#limited);
    this.#limited = limited;
    const now = new Set(limited);
    this.#unlimited = this.#deps.queues.filter((q) => !now.has(q));
    for (const queue of limited) {
      this.#short.add(queue);
      if (!before.has(queue)) this.#deps.onLimited(queue);
    }
  }

  /** Re-reads limits every poll interval. */
  start(): void {
    this.#timer = setInterval(() => this.#refreshSoon(false), this.#deps.pollIntervalMs);
    this.#timer.unref();
  }

  /** Stops re-reading; resolves when no read is in flight. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#refreshes.stop();
  }

  /** A `limits` message: re-read if it concerns one of the worker's queues, then claim. */
  onLimitsMessage(queue: string | null): void {
    if (queue === null || this.#deps.queues.includes(queue)) this.#refreshSoon(true);
  }

  /** A wake-up for `queue` (null: any queue): its jobs may wait for this worker's slots. */
  onWakeUp(queue: string | null): void {
    if (this.#limited.length === 0) return;
    if (queue === null) for (const q of this.#limited) this.#short.add(q);
    else if (this.#limited.includes(queue)) this.#short.add(queue);
  }

  /** Re-reads limits in the background; a request during a read reads again after it. */
  #refreshSoon(wake: boolean): void {
    if (wake) this.#wakeAfterRefresh = true;
    this.#refreshes.request();
  }

  /**
   * Claims up to `limit` jobs: limited queues first, for free slots only, then
   * the unlimited queues for the rest.
   *
   * @throws {DatabaseError} when the first claim fails (jobs claimed before a
   *   later failure are returned, and the failure is reported).
   */
  async claim(limit: number): Promise<ClaimedJob[]> {
    // A read of limits in flight is waited for (a limits message's wake-up may come before it).
    const reading = this.#refreshes.current();
    if (reading) await reading;
    const limited = this.#limited;
    if (limited.length === 0) return this.#claimUnlimited(this.#unlimited, limit);
    const jobs: ClaimedJob[] = [];
    try {
      let free = Math.min(limit, this.#deps.freeSlots());
      let starved = false;
      const first = this.#turn++ % limited.length;
      for (let i = 0; i < limited.length; i++) {
        const queue = limited[(first + i) % limited.length]!;
        if (free <= 0) {
          this.#deps.fetcher().retryOnSlotFreed();
          if (this.#short.has(queue)) starved = true;
          continue;
        }
        const claim = await this.#deps.queries.limitedClaim.claim(this.#deps.pool, {
          ...this.#deps.request,
          queues: [queue],
          limit: free,
        });
        if (this.#afterLimitedClaim(queue, claim, free)) starved = true;
        for (const job of claim.jobs) jobs.push(job);
        free -= claim.jobs.length;
      }
      // A limited queue waits for this worker's slots: no prefetch for the others meanwhile.
      const rest = starved ? Math.min(limit - jobs.length, Math.max(0, free)) : limit - jobs.length;
      if (this.#unlimited.length > 0 && rest > 0)
        for (const job of await this.#claimUnlimited(this.#unlimited, rest)) jobs.push(job);
    } catch (error) {
      if (jobs.length === 0) throw error;
      // The jobs are claimed: run them; the next slot, wake-up or poll claims again.
      this.#deps.onError(translateError(error));
    }
    return jobs;
  }

  #claimUnlimited(queues: readonly string[], limit: number): Promise<ClaimedJob[]> {
    if (queues.length === 0) return Promise.resolve([]);
    return this.#deps.queries.claim.claim(this.#deps.pool, { ...this.#deps.request, queues, limit });
  }

  /**
   * Schedules the next claim of a queue whose limits or this worker's free
   * slots, not its jobs, ended this one, and keeps it among the waiting
   * queues then. Returns true when the free slots ended it.
   */
  #afterLimitedClaim(queue: string, claim: LimitedClaim, requested: number): boolean {
    const claimed = claim.jobs.length;
    const byLimits = Math.min(claim.concurrencyRoom ?? requested + 1, claim.rateRoom ?? requested + 1);
    // Fewer than allowed: the queue had no more due jobs; the insert wake-up brings the next.
    if (claimed < Math.min(requested, byLimits)) {
      this.#short.delete(queue);
      return false;
    }
    this.#short.add(queue);
    this.#deps.fetcher().retryOnSlotFreed();
    if (claim.rateRoom !== null && claimed >= claim.rateRoom && claim.rateWaitMs !== null)
      this.#deps.fetcher().wakeAfter(claim.rateWaitMs + 1);
    return byLimits > requested;
  }
}
