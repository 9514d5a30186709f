/**
 * The life cycle every background loop shares (claim loop, completer,
 * heartbeat, maintenance, scheduler): `start()` once, `wake()` any number of
 * times, `stop()` resolves when the loop's current pass is over. A loop is
 * written as one `async run()` that waits with {@link Service.wait}, so its
 * timing is read in one place and driven by an injectable {@link Clock}.
 */
import { type Clock, systemClock, type TimerOptions } from './clock.js';

/** Why {@link Service.wait} returned. */
export type WaitResult = 'timeout' | 'woken' | 'stopped';

/** Where a service is in its life. */
export type ServiceState = 'new' | 'running' | 'stopping' | 'stopped';

/** A background loop with one start, one stop and an injectable clock. */
export abstract class Service {
  /** The clock this loop reads and sets its timers on. */
  protected readonly clock: Clock;
  readonly #stopping = new AbortController();
  #state: ServiceState = 'new';
  #running: Promise<void> | undefined;
  /** A wake() came while the loop was not waiting: the next wait returns at once. */
  #woken = false;
  #release: ((result: WaitResult) => void) | undefined;

  /** @param clock - defaults to the process's clock. */
  constructor(clock: Clock = systemClock) {
    this.clock = clock;
  }

  /** `'new'` until `start()`, `'running'`, `'stopping'` during `stop()`, then `'stopped'`. */
  get state(): ServiceState {
    return this.#state;
  }

  /** Aborted when `stop()` is called. */
  protected get stopSignal(): AbortSignal {
    return this.#stopping.signal;
  }

  /** True once `stop()` was called. */
  protected get stopped(): boolean {
    return this.#stopping.signal.aborted;
  }

  /**
   * Starts the loop. A second call does nothing.
   * The loop must not reject; a rejection is passed to {@link Service.onCrash}.
   */
  start(): void {
    if (this.#state !== 'new') return;
    this.#state = 'running';
    this.#running = this.run().catch((error: unknown) => this.onCrash(error));
  }

  /** Ends the wait in progress, or makes the next one return at once. */
  wake(): void {
    if (this.#release) this.#settle('woken');
    else this.#woken = true;
  }

  /** Stops the loop: ends its wait and resolves once its current pass returns. */
  async stop(): Promise<void> {
    if (this.#state === 'new') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'running') this.#state = 'stopping';
    this.#stopping.abort();
    this.#settle('stopped');
    await this.#running;
    this.#state = 'stopped';
  }

  /**
   * Waits `delayMs` milliseconds on the clock (`Infinity`: until woken or
   * stopped), or less when {@link Service.wake} or `stop()` comes first.
   */
  protected wait(delayMs: number, options?: TimerOptions): Promise<WaitResult> {
    if (this.stopped) return Promise.resolve('stopped');
    if (this.#woken) {
      this.#woken = false;
      return Promise.resolve('woken');
    }
    return new Promise((resolve) => {
      const timer =
        delayMs === Number.POSITIVE_INFINITY
          ? undefined
          : this.clock.setTimeout(() => this.#settle('timeout'), delayMs, options);
      this.#release = (result) => {
        this.clock.clearTimeout(timer);
        resolve(result);
      };
    });
  }

  #settle(result: WaitResult): void {
    const release = this.#release;
    this.#release = undefined;
    release?.(result);
  }

  /** The loop's body: runs until {@link Service.stopped}. */
  protected abstract run(): Promise<void>;

  /** Called if `run()` rejects (a bug: loops report their own errors). Defaults to rethrowing later. */
  protected onCrash(error: unknown): void {
    queueMicrotask(() => {
      throw error;
    });
  }
}
