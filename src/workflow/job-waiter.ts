/**
 * `waitFor`: resolves when a job reaches a final status. Every waiter of one
 * Skiplock shares one LISTEN connection on the schema's completion channel
 * (opened by the first waiter, closed when the last one leaves), and one poll
 * on the clock as the safety net for messages lost while that connection was
 * away. Waiting marks the job's row as awaited, so only awaited jobs send a
 * completion message (see migrations 0014 and 0023); jobs nobody waits for send none.
 *
 * A job that was there when the wait began and is gone from both the jobs
 * table and the archive ended by its success, deleted by the `'delete'`
 * policy: it resolves as `succeeded` without a result. (A job deleted by an
 * operator meanwhile reads the same.)
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import type { AwaitedState } from '../db/queries/waiting.js';
import { JobNotFoundError, SkiplockError, ValidationError, WaitTimeoutError } from '../errors.js';
import { isJobId } from '../job/defaults.js';
import type { JobStatus } from '../job/job.js';
import { type Clock, systemClock, type TimerHandle } from '../runtime/clock.js';
import { Notifier } from '../worker/notifier.js';

/** The final statuses: a job in one of them never changes again by itself. */
const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set(['succeeded', 'failed', 'dead', 'cancelled']);

/** Time between the safety-net polls while anyone waits, in milliseconds. */
export const WAIT_POLL_INTERVAL_MS = 5_000;

/** Most ids one poll reads in a statement. */
const POLL_CHUNK = 1_000;

/** Options of `waitFor`. */
export interface WaitForOptions {
  /**
   * Give up after this many milliseconds (a positive integer): the wait
   * rejects with a {@link WaitTimeoutError} naming the job. @default no limit
   */
  timeoutMs?: number | undefined;
  /** Aborting it ends the wait: it rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** How a job ended, as `waitFor` resolves. */
export interface JobOutcome {
  /** The job's final status. */
  status: 'succeeded' | 'failed' | 'dead' | 'cancelled';
  /**
   * The handler's return value, stored when the job's row outlived its success
   * (`onSuccess` `'keep'` or `'archive'`); null otherwise.
   */
  result: unknown;
  /**
   * Why a job that ended `failed`, `dead` or `cancelled` did (its last
   * failure, an expiry, a parent's end); null for a success, also one after
   * failed attempts (`getJob` keeps those in `errors`).
   */
  lastError: string | null;
}

/** What the waiter needs from its Skiplock. */
export interface JobWaiterDeps {
  pool: Pick<pg.Pool, 'query'>;
  queries: JobQueries;
  /** Settings of the LISTEN connection. */
  clientConfig: pg.ClientConfig;
  clock?: Clock;
}

/** One call's wait. */
interface Waiting {
  id: string;
  /** Set once the job was seen to exist: from then on, a job gone from both tables succeeded. */
  seen: boolean;
  /** A message or poll named the job before it was seen: read it again once it is. */
  missed: boolean;
  resolve(outcome: JobOutcome): void;
  reject(error: unknown): void;
}

/**
 * How long past `timeoutMs` a wait still takes the answer of its first read
 * of the job (milliseconds): a job that does not exist is named so even when
 * `timeoutMs` is shorter than a round trip, and a database that does not
 * answer delays the timeout by no more than this.
 */
export const FIRST_READ_GRACE_MS = 1_000;

/** The waiters of one Skiplock. */
export class JobWaiter {
  readonly #deps: JobWaiterDeps;
  readonly #clock: Clock;
  /** Waits by job id. */
  readonly #waiting = new Map<string, Set<Waiting>>();
  #notifier: Notifier | undefined;
  #listening: Promise<void> | undefined;
  #pollTimer: TimerHandle | undefined;
  /** Ids a message named, read together on the next turn. */
  #heard = new Set<string>();
  #reading = false;
  #closed = false;

  constructor(deps: JobWaiterDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
  }

  /** Waits in this process: the number of calls not yet settled. */
  get size(): number {
    let n = 0;
    for (const set of this.#waiting.values()) n += set.size;
    return n;
  }

  /**
   * Resolves once job `id` reaches a final status. See `Skiplock.waitFor`.
   *
   * @throws {ValidationError} naming `id`, `options.timeoutMs`, `options.signal` or an unknown option.
   * @throws {JobNotFoundError} when the job does not exist, however short `timeoutMs` is
   *   (unless the database takes more than {@link FIRST_READ_GRACE_MS} past it to say so).
   * @throws {WaitTimeoutError} after `timeoutMs`, when the job exists and was not final when read.
   */
  async waitFor(id: string, options: WaitForOptions = {}): Promise<JobOutcome> {
    if (!isJobId(id))
      throw new ValidationError('id', 'must be a job id (a decimal string within bigint range)');
    if (typeof options !== 'object' || options === null)
      throw new ValidationError('options', 'must be an object of timeoutMs and signal');
    for (const key of Object.keys(options))
      if (key !== 'timeoutMs' && key !== 'signal')
        throw new ValidationError(`options.${key}`, 'is not an option of waitFor (timeoutMs, signal)');
    const { timeoutMs, signal } = options;
    if (
      timeoutMs !== undefined &&
      (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 2_147_483_647)
    )
      throw new ValidationError('options.timeoutMs', 'must be an integer of milliseconds in 1…2147483647');
    if (signal !== undefined && !(signal instanceof AbortSignal))
      throw new ValidationError('options.signal', 'must be an AbortSignal');
    signal?.throwIfAborted();
    if (this.#closed) throw new SkiplockError('CLOSED', 'this Skiplock was closed');

    let timer: TimerHandle | undefined;
    let grace: TimerHandle | undefined;
    let expired: WaitTimeoutError | undefined;
    let onAbort: (() => void) | undefined;
    let waiting!: Waiting;
    const settled = new Promise<JobOutcome>((resolve, reject) => {
      waiting = { id, seen: false, missed: false, resolve, reject };
    });
    const leave = () => {
      this.#clock.clearTimeout(timer);
      this.#clock.clearTimeout(grace);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      this.#remove(waiting);
    };
    // Registered before the job is read, so that a message sent meanwhile is heard.
    this.#add(waiting);
    if (timeoutMs !== undefined)
      timer = this.#clock.setTimeout(() => {
        expired = new WaitTimeoutError(id, timeoutMs);
        waiting.reject(expired);
      }, timeoutMs);
    if (signal) {
      onAbort = () => waiting.reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
    }
    try {
      await Promise.race([this.#listen(), settled.then(noop, noop)]);
      const watching = this.#deps.queries.waiting.watch(this.#deps.pool, id);
      // The timeout lets this first read finish, for up to FIRST_READ_GRACE_MS
      // more: its answer (not there, already final) wins over a short `timeoutMs`.
      const state = await Promise.race([
        watching,
        settled.catch((error: unknown) => {
          if (error !== expired) throw error;
          return new Promise<Awaited<typeof watching>>((resolve, reject) => {
            grace = this.#clock.setTimeout(() => reject(expired), FIRST_READ_GRACE_MS);
            watching.then(resolve, reject);
          });
        }),
      ]);
      if (state !== undefined && 'id' in state) {
        waiting.seen = true;
        if (FINAL_STATUSES.has(state.status)) return outcomeOf(state);
        else if (waiting.missed || state.settledMeanwhile) {
          this.#heard.add(id);
          void this.#readHeard();
        }
      } else if (state === undefined) {
        throw new JobNotFoundError(id);
      }
      return await settled;
    } finally {
      leave();
    }
  }

  /** Ends every wait (rejects it) and closes the LISTEN connection. */
  async close(): Promise<void> {
    this.#closed = true;
    const error = new SkiplockError('CLOSED', 'this Skiplock was closed');
    for (const set of this.#waiting.values()) for (const w of set) w.reject(error);
    await this.#stopListening();
  }

  #add(waiting: Waiting): void {
    const set = this.#waiting.get(waiting.id);
    if (set) set.add(waiting);
    else this.#waiting.set(waiting.id, new Set([waiting]));
    if (this.#pollTimer === undefined) this.#schedulePoll();
  }

  #remove(waiting: Waiting): void {
    const set = this.#waiting.get(waiting.id);
    if (!set?.delete(waiting)) return;
    if (set.size === 0) this.#waiting.delete(waiting.id);
    if (this.#waiting.size === 0) {
      this.#clock.clearTimeout(this.#pollTimer);
      this.#pollTimer = undefined;
      void this.#stopListening();
    }
  }

  /** Opens the shared LISTEN connection if none is open; resolves after its first attempt. */
  #listen(): Promise<void> {
    if (this.#listening) return this.#listening;
    const notifier = new Notifier(
      this.#deps.clientConfig,
      this.#deps.queries.waiting.channel,
      {
        onWakeUp: (message) => {
          for (const id of message.ids ?? []) if (this.#waiting.has(id)) this.#heard.add(id);
          if (this.#heard.size > 0) void this.#readHeard();
        },
        // Messages sent while the connection was away are lost: read every wait again.
        onListening: () => {
          if (notifier !== this.#notifier) return;
          for (const id of this.#waiting.keys()) this.#heard.add(id);
          void this.#readHeard();
        },
        // The poll covers a connection that fails; it reconnects by itself.
        onError: () => {},
      },
      this.#clock,
    );
    this.#notifier = notifier;
    this.#listening = notifier.start();
    return this.#listening;
  }

  async #stopListening(): Promise<void> {
    const notifier = this.#notifier;
    this.#notifier = undefined;
    this.#listening = undefined;
    await notifier?.stop();
  }

  #schedulePoll(): void {
    this.#pollTimer = this.#clock.setTimeout(() => {
      for (const id of this.#waiting.keys()) this.#heard.add(id);
      void this.#readHeard().finally(() => {
        if (this.#waiting.size > 0 && this.#pollTimer !== undefined) this.#schedulePoll();
      });
    }, WAIT_POLL_INTERVAL_MS);
  }

  /** Reads the jobs messages or the poll named, and settles the waits of those that ended. */
  async #readHeard(): Promise<void> {
    if (this.#reading) return;
    this.#reading = true;
    try {
      // Messages of one turn are read together.
      await new Promise((resolve) => setImmediate(resolve));
      while (this.#heard.size > 0) {
        const ids = [...this.#heard].slice(0, POLL_CHUNK);
        for (const id of ids) this.#heard.delete(id);
        let states: AwaitedState[];
        try {
          states = await this.#deps.queries.waiting.states(this.#deps.pool, ids);
        } catch {
          // The next poll reads them again.
          return;
        }
        const byId = new Map(states.map((s) => [s.id, s]));
        for (const id of ids) {
          const state = byId.get(id);
          for (const w of [...(this.#waiting.get(id) ?? [])]) {
            if (!w.seen) {
              w.missed = true;
              continue;
            }
            if (!state) w.resolve({ status: 'succeeded', result: null, lastError: null });
            else if (FINAL_STATUSES.has(state.status)) w.resolve(outcomeOf(state));
          }
        }
      }
    } finally {
      this.#reading = false;
    }
  }
}

function outcomeOf(state: AwaitedState): JobOutcome {
  return {
    status: state.status as JobOutcome['status'],
    result: state.result ?? null,
    lastError: state.status === 'succeeded' ? null : state.lastError,
  };
}

function noop(): void {}
