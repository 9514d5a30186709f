/**
 * The progress and log lines of one attempt, on their way to the job's row.
 * Writes are coalesced: at most one is in flight, and the next waits until
 * {@link PROGRESS_WRITE_INTERVAL_MS} after the previous began, carrying the
 * newest progress value and every line logged meanwhile (the newest
 * {@link MAX_LOG_LINES}). A handler that reports progress in a tight loop
 * costs a few writes a second, and the last value wins.
 */
import type { ProgressWriteOutcome } from '../db/queries/progress.js';
import type { Clock, TimerHandle } from '../runtime/clock.js';
import { logLine, MAX_LOG_LINES, serializeProgress } from './job-output.js';

/** Least time between the starts of two writes of one attempt, in milliseconds. */
export const PROGRESS_WRITE_INTERVAL_MS = 250;

/** Where the attempts of one worker send their progress (one object for all of them). */
export interface ProgressSink {
  /**
   * Writes attempt's progress (JSON text, null: unchanged) and appends the
   * lines, fenced by its lease; resolves `'lost'` when the lease is gone (or
   * the write failed: progress is advisory, the attempt goes on), `'locked'`
   * when another transaction holds the job's row (nothing written).
   */
  write(attempt: unknown, progressJson: string | null, lines: string[]): Promise<ProgressWriteOutcome>;
  clock: Clock;
}

/** Coalesces one attempt's progress writes. */
export class ProgressWriter {
  readonly #sink: ProgressSink;
  readonly #attempt: unknown;
  #progress: string | null = null;
  #lines: string[] = [];
  /** Callers whose values the next write carries. */
  #waiting: ((written: boolean) => void)[] = [];
  /** The write in flight, if any. */
  #current: Promise<void> | undefined;
  #timer: TimerHandle | undefined;
  /** Monotonic time the last write began (-Infinity: none yet). */
  #lastWriteAt = Number.NEGATIVE_INFINITY;

  constructor(sink: ProgressSink, attempt: unknown) {
    this.#sink = sink;
    this.#attempt = attempt;
  }

  /** See HandlerContext.progress. */
  progress(value: unknown): Promise<boolean> {
    try {
      this.#progress = serializeProgress(value);
    } catch (error) {
      return refused(error);
    }
    return this.#queue();
  }

  /** See HandlerContext.log. */
  log(line: unknown): Promise<boolean> {
    try {
      this.#lines.push(logLine(line));
    } catch (error) {
      return refused(error);
    }
    if (this.#lines.length > MAX_LOG_LINES) this.#lines.splice(0, this.#lines.length - MAX_LOG_LINES);
    return this.#queue();
  }

  #queue(): Promise<boolean> {
    const written = new Promise<boolean>((resolve) => this.#waiting.push(resolve));
    this.#schedule();
    return written;
  }

  /**
   * Writes what is queued now rather than after the interval, and resolves
   * once nothing is queued or in flight: the attempt's end waits for it, so
   * a report the handler did not await still reaches the row under its lease.
   * Never rejects (a write that fails resolves its callers with false).
   */
  async flush(): Promise<void> {
    for (;;) {
      if (this.#current) {
        await this.#current;
        continue;
      }
      if (this.#waiting.length === 0 && this.#progress === null && this.#lines.length === 0) return;
      this.#sink.clock.clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#current = this.#write(true);
    }
  }

  /** Whether a report is queued or being written. */
  get pending(): boolean {
    return (
      this.#current !== undefined ||
      this.#waiting.length > 0 ||
      this.#progress !== null ||
      this.#lines.length > 0
    );
  }

  #schedule(): void {
    if (this.#current || this.#timer !== undefined) return;
    if (this.#waiting.length === 0 && this.#progress === null && this.#lines.length === 0) return;
    const waitMs = Math.max(0, this.#lastWriteAt + PROGRESS_WRITE_INTERVAL_MS - this.#sink.clock.monotonic());
    this.#timer = this.#sink.clock.setTimeout(() => {
      this.#timer = undefined;
      this.#current = this.#write();
    }, waitMs);
  }

  /**
   * One write of what is queued. When another transaction holds the row, its
   * callers learn at once that nothing was written (a handler awaiting it must
   * not wait for a lock its own transaction may hold), and the values are
   * carried into the next write, unless this is the attempt's last one
   * (`last`), which gives them up.
   */
  async #write(last = false): Promise<void> {
    const progress = this.#progress;
    const lines = this.#lines;
    const waiting = this.#waiting;
    this.#progress = null;
    this.#lines = [];
    this.#waiting = [];
    this.#lastWriteAt = this.#sink.clock.monotonic();
    let outcome: ProgressWriteOutcome = 'lost';
    try {
      outcome = await this.#sink.write(this.#attempt, progress, lines);
    } catch {}
    this.#current = undefined;
    if (outcome === 'locked' && !last) {
      this.#progress ??= progress;
      this.#lines = [...lines, ...this.#lines].slice(-MAX_LOG_LINES);
    }
    for (const resolve of waiting) resolve(outcome === 'written');
    if (!last) this.#schedule();
  }
}

/**
 * A rejected report: awaited, it throws in the handler; left unawaited (`void
 * progress(…)`), it is dropped rather than crash the process as an unhandled rejection.
 */
function refused(error: unknown): Promise<boolean> {
  const rejected = Promise.reject(error);
  rejected.catch(() => {});
  return rejected;
}
