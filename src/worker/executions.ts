/**
 * The jobs a worker holds: claimed ahead into a local buffer (prefetch), and
 * running in a slot. Every held job has a lease that the heartbeat keeps alive
 * and that stop gives back; this set is what they read.
 */
import type { ClaimedJob } from '../db/queries/claim.js';
import type { SuccessPolicy } from '../db/queries/finish.js';
import type { Job } from '../job/job.js';
import { type Clock, systemClock } from '../runtime/clock.js';
import { AttemptControl } from './executor.js';

/** One claimed job from buffer to result, with what its lease is fenced by. */
export interface Execution {
  id: string;
  attempts: number;
  leaseSeq: string;
  job: Job;
  /** The job's stored trace context (JSON text), when the worker traces (see telemetry/tracing.ts). */
  traceContext: string | null | undefined;
  /** The job's own success policy (enqueue option `onSuccess`); undefined: the worker's. */
  onSuccess: SuccessPolicy | undefined;
  /**
   * The clock's monotonic time when its claim was sent (the claim saw the
   * table no earlier): a buffered job given back after too long a wait, or
   * checked for a pause before it starts, is judged by it.
   */
  claimedAt: number;
  /** The clock's monotonic time when its handler started (0 while buffered). */
  startedAt: number;
  /** Made when the handler starts: aborts the attempt (timeout, cancel, stop, lost lease). */
  control: AttemptControl | undefined;
  /** `buffered` → `running` → `done`; or `released` (given back), or `lost` (reclaimed by the sweeper). */
  state: 'buffered' | 'running' | 'done' | 'released' | 'lost';
  /** Its place among the executions holding a slot; -1 when it holds none. */
  slot: number;
}

/** Makes the execution of a claimed job, buffered. */
export function bufferedExecution(claimed: ClaimedJob, now: number): Execution {
  // The handler's job: the Job fields, copied by name (an object rest is a slow generic copy, once per job).
  const job: Job = {
    id: claimed.id,
    kind: claimed.kind,
    queue: claimed.queue,
    payload: claimed.payload,
    priority: claimed.priority,
    runAt: claimed.runAt,
    attempts: claimed.attempts,
    maxAttempts: claimed.maxAttempts,
    createdAt: claimed.createdAt,
  };
  return {
    id: claimed.id,
    attempts: claimed.attempts,
    leaseSeq: claimed.leaseSeq,
    job,
    traceContext: claimed.traceContext,
    onSuccess: claimed.onSuccess,
    claimedAt: now,
    startedAt: 0,
    control: undefined,
    state: 'buffered',
    slot: -1,
  };
}

/** Buffered (FIFO) and running executions of one worker. */
export class Executions {
  #buffer: Execution[] = [];
  #head = 0;
  /**
   * The executions holding a slot, in no order. An array rather than a Set: a
   * Set's table, replaced as entries come and go, links to its successor,
   * and once one table reached the old generation that chain kept every
   * later job's objects alive until a major collection.
   */
  readonly #running: Execution[] = [];
  #idleWaiters: (() => void)[] = [];
  readonly #clock: Clock;

  /** @param clock - times {@link Executions.whenIdle}'s deadline; defaults to the process's clock. */
  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  /** Jobs claimed and not yet started (a few whose lease was lost may still be counted until skipped). */
  get bufferedCount(): number {
    return this.#buffer.length - this.#head;
  }

  /** Jobs whose handler runs now. */
  get runningCount(): number {
    return this.#running.length;
  }

  /** Adds claimed jobs to the end of the buffer. */
  buffer(executions: readonly Execution[]): void {
    for (const e of executions) this.#buffer.push(e);
  }

  /** The oldest buffered job, the one {@link Executions.start} would take; undefined when none. */
  peek(): Execution | undefined {
    for (let i = this.#head; i < this.#buffer.length; i++) {
      const e = this.#buffer[i]!;
      if (e.state === 'buffered') return e;
    }
    return undefined;
  }

  /**
   * Takes the oldest buffered job and marks it running; undefined when the
   * buffer is empty. A buffered job whose lease was lost meanwhile is dropped.
   */
  start(now: number): Execution | undefined {
    let e: Execution | undefined;
    while (this.#head < this.#buffer.length && e === undefined) {
      const next = this.#buffer[this.#head]!;
      this.#buffer[this.#head++] = undefined as unknown as Execution;
      if (next.state === 'buffered') e = next;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#buffer.length) {
      this.#buffer = this.#buffer.slice(this.#head);
      this.#head = 0;
    }
    if (e === undefined) return undefined;
    e.state = 'running';
    e.startedAt = now;
    e.control = new AttemptControl();
    this.#hold(e);
    return e;
  }

  /**
   * Takes up to `max` buffered jobs of `kind`, oldest first, and marks them
   * running (a batch handler's jobs); the others keep their order.
   */
  startKind(kind: string, max: number, now: number): Execution[] {
    const taken: Execution[] = [];
    const kept: Execution[] = [];
    for (let i = this.#head; i < this.#buffer.length; i++) {
      const e = this.#buffer[i]!;
      if (e.state !== 'buffered') continue;
      if (taken.length < max && e.job.kind === kind) taken.push(e);
      else kept.push(e);
    }
    if (taken.length === 0) return taken;
    this.#buffer = kept;
    this.#head = 0;
    for (const e of taken) {
      e.state = 'running';
      e.startedAt = now;
      e.control = new AttemptControl();
      this.#hold(e);
    }
    return taken;
  }

  #hold(e: Execution): void {
    e.slot = this.#running.length;
    this.#running.push(e);
  }

  /** A running job's handler settled (or its lease is gone): it no longer holds a slot. */
  finish(e: Execution): void {
    if (e.slot >= 0) {
      const last = this.#running.pop()!;
      if (last !== e) {
        this.#running[e.slot] = last;
        last.slot = e.slot;
      }
      e.slot = -1;
    }
    if (e.state === 'running') e.state = 'done';
    this.#notifyIdle();
  }

  /** Empties the buffer: buffered jobs claimed before `claimedBefore` (all when omitted), oldest first. */
  takeBuffered(claimedBefore = Number.POSITIVE_INFINITY): Execution[] {
    const taken: Execution[] = [];
    while (this.#head < this.#buffer.length && this.#buffer[this.#head]!.claimedAt < claimedBefore) {
      const e = this.#buffer[this.#head]!;
      if (e.state === 'buffered') taken.push(e);
      this.#buffer[this.#head++] = undefined as unknown as Execution;
    }
    if (this.#head === this.#buffer.length) {
      this.#buffer = [];
      this.#head = 0;
    }
    return taken;
  }

  /** Takes up to `count` of the newest buffered jobs (the last claimed), oldest of them first. */
  takeNewestBuffered(count: number): Execution[] {
    const taken: Execution[] = [];
    while (taken.length < count && this.#buffer.length > this.#head) {
      const e = this.#buffer.pop()!;
      if (e.state === 'buffered') taken.push(e);
    }
    return taken.reverse();
  }

  /** Takes the buffered jobs that `match` (a cancel, or a paused queue), keeping the others in order. */
  takeBufferedWhere(match: (e: Execution) => boolean): Execution[] {
    const taken: Execution[] = [];
    const kept: Execution[] = [];
    for (let i = this.#head; i < this.#buffer.length; i++) {
      const e = this.#buffer[i]!;
      (match(e) ? taken : kept).push(e);
    }
    if (taken.length > 0) {
      this.#buffer = kept;
      this.#head = 0;
    }
    return taken;
  }

  /** Running executions, and buffered ones: every lease this worker holds. */
  leased(): Execution[] {
    const held: Execution[] = [];
    for (const e of this.#running) if (e.state === 'running') held.push(e);
    for (let i = this.#head; i < this.#buffer.length; i++) {
      const e = this.#buffer[i]!;
      if (e.state === 'buffered') held.push(e);
    }
    return held;
  }

  /** Running executions. */
  running(): Execution[] {
    return this.#running.slice();
  }

  /**
   * Resolves when no handler runs except those in `except` (read again at
   * every finish), or after `timeoutMs` on the clock. The deadline keeps the process alive: a stop is waiting on it.
   */
  async whenIdle(timeoutMs: number, except: ReadonlySet<Execution> = new Set()): Promise<void> {
    const busy = () => {
      for (const e of this.#running) if (!except.has(e)) return true;
      return false;
    };
    if (!busy()) return;
    let timer: unknown;
    await new Promise<void>((resolve) => {
      const check = () => {
        if (busy()) {
          this.#idleWaiters.push(check);
          return;
        }
        resolve();
      };
      this.#idleWaiters.push(check);
      timer = this.#clock.setTimeout(resolve, timeoutMs, { keepAlive: true });
    });
    this.#clock.clearTimeout(timer);
  }

  #notifyIdle(): void {
    if (this.#idleWaiters.length === 0) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const check of waiters) check();
  }
}
