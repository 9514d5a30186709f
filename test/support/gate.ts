/** A promise with its resolver, for handlers a test releases by hand. */
export interface Gate<T> {
  open(value: T): void;
  opened: Promise<T>;
}

/** A closed gate: `opened` resolves when the test calls `open`. */
export function gate<T = void>(): Gate<T> {
  let open!: (value: T) => void;
  const opened = new Promise<T>((resolve) => {
    open = resolve;
  });
  return { open, opened };
}

/** A handler that holds its slot once its worker has jobs buffered behind it. */
export interface SlotBlocker {
  /** The handler: quick while nothing is buffered (so the worker claims ahead), then waits for `release`. */
  handler: () => Promise<void>;
  /** Whether a job holds the slot now. */
  readonly blocked: boolean;
  /** Lets the blocked job finish (every later job runs quickly). */
  release(): void;
}

/**
 * A worker with one slot busy and a buffer behind it: give `handler` to a
 * worker of concurrency 1 and prefetch, then wait for `blocked` and a buffer.
 *
 * @param worker - the worker the handler runs in (read when a job runs).
 */
export function blockOnceBuffered(worker: () => { bufferedCount: number }): SlotBlocker {
  const released = gate();
  let blocked = false;
  return {
    handler: async () => {
      if (!blocked && worker().bufferedCount > 0) {
        blocked = true;
        await released.opened;
      }
    },
    get blocked() {
      return blocked;
    },
    release: () => released.open(),
  };
}
