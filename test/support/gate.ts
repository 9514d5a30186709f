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
  handler: (job: { id: string }) => Promise<void>;
  /** Whether a job holds the slot now. */
  readonly blocked: boolean;
  /** The id of the job that holds the slot (undefined before one does). */
  readonly blockedId: string | undefined;
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
  let blockedId: string | undefined;
  return {
    handler: async (job) => {
      if (blockedId === undefined && worker().bufferedCount > 0) {
        blockedId = job.id;
        await released.opened;
      }
    },
    get blocked() {
      return blockedId !== undefined;
    },
    get blockedId() {
      return blockedId;
    },
    release: () => released.open(),
  };
}

/** A handler that runs until its job is aborted, then rejects with the abort's reason. */
export interface UntilAborted {
  handler: (job: unknown, context: { signal: AbortSignal }) => Promise<never>;
  /** The reason of the abort it saw last (undefined before any). */
  readonly reason: unknown;
}

/** A handler that waits for its signal (see {@link UntilAborted}). */
export function untilAborted(): UntilAborted {
  let reason: unknown;
  return {
    handler: (_job, { signal }) =>
      new Promise<never>((_, reject) => {
        signal.addEventListener('abort', () => {
          reason = signal.reason;
          reject(signal.reason);
        });
      }),
    get reason() {
      return reason;
    },
  };
}
