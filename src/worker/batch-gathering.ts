/**
 * Batches being gathered for batch handlers: one open batch per kind at most,
 * which takes jobs of its kind as they arrive and runs (is launched) when it
 * is full or when its wait (`maxWaitMs`, on the worker's clock) ends.
 */
import type { Clock, TimerHandle } from '../runtime/clock.js';
import type { AttemptControl } from './executor.js';

interface OpenBatch<T> {
  items: T[];
  maxBatchSize: number;
  control: AttemptControl;
  timer: TimerHandle | undefined;
}

/** The open batches of one worker, by kind. */
export class BatchGathering<T> {
  readonly #open = new Map<string, OpenBatch<T>>();
  readonly #clock: Clock;
  readonly #launch: (kind: string, items: T[], control: AttemptControl) => void;

  /** @param launch - runs a batch that is full or done waiting (called once per batch). */
  constructor(clock: Clock, launch: (kind: string, items: T[], control: AttemptControl) => void) {
    this.#clock = clock;
    this.#launch = launch;
  }

  /** Number of open batches. */
  get size(): number {
    return this.#open.size;
  }

  /** Kinds with an open batch. */
  kinds(): string[] {
    return [...this.#open.keys()];
  }

  /** How many more items `kind`'s open batch takes (0 when it has none). */
  room(kind: string): number {
    const batch = this.#open.get(kind);
    return batch ? batch.maxBatchSize - batch.items.length : 0;
  }

  /**
   * Opens a batch of `kind` with `items` (the kind has none open); it is
   * launched at once when full or when `maxWaitMs` is 0, else after
   * `maxWaitMs` or when {@link BatchGathering.add} fills it.
   */
  open(kind: string, items: T[], maxBatchSize: number, maxWaitMs: number, control: AttemptControl): void {
    if (items.length >= maxBatchSize || maxWaitMs <= 0) {
      this.#launch(kind, items, control);
      return;
    }
    const batch: OpenBatch<T> = { items, maxBatchSize, control, timer: undefined };
    this.#open.set(kind, batch);
    batch.timer = this.#clock.setTimeout(() => this.#close(kind), maxWaitMs);
  }

  /** Adds `items` to `kind`'s open batch (at most its room); launches it when full. */
  add(kind: string, items: readonly T[]): void {
    const batch = this.#open.get(kind);
    if (!batch) return;
    for (const item of items) batch.items.push(item);
    if (batch.items.length >= batch.maxBatchSize) this.#close(kind);
  }

  /** Launches every open batch now (the worker stops). */
  flush(): void {
    for (const kind of this.kinds()) this.#close(kind);
  }

  #close(kind: string): void {
    const batch = this.#open.get(kind);
    if (!batch) return;
    this.#open.delete(kind);
    this.#clock.clearTimeout(batch.timer);
    this.#launch(kind, batch.items, batch.control);
  }
}
