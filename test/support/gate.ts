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
