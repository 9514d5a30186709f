/**
 * Failed basic-auth attempts per client, so a password cannot be guessed at
 * network speed: after {@link MAX_AUTH_FAILURES} failures in a window of
 * {@link AUTH_WINDOW_MS}, the client gets 429 until the window ends. Memory is
 * bounded: at most {@link MAX_TRACKED_CLIENTS} clients are remembered, the
 * oldest forgotten first.
 */

/** Failed attempts a client may make per window. */
export const MAX_AUTH_FAILURES = 10;
/** Length of a client's window, in milliseconds, from its first failure. */
export const AUTH_WINDOW_MS = 60_000;
/** Most clients remembered at once. */
export const MAX_TRACKED_CLIENTS = 10_000;

/** The failure counts of one dashboard's clients. */
export class AuthThrottle {
  readonly #clients = new Map<string, { failures: number; since: number }>();
  readonly #now: () => number;

  /** @param now - the clock, in milliseconds (tests pass their own). */
  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** Clients remembered now. */
  get size(): number {
    return this.#clients.size;
  }

  /** Milliseconds until `client` may try again; 0 when it may now. */
  retryAfterMs(client: string): number {
    const entry = this.#current(client);
    if (!entry || entry.failures < MAX_AUTH_FAILURES) return 0;
    return Math.max(1, entry.since + AUTH_WINDOW_MS - this.#now());
  }

  /** Counts a failed attempt of `client`. */
  fail(client: string): void {
    const entry = this.#current(client);
    if (entry) {
      entry.failures += 1;
      return;
    }
    if (this.#clients.size >= MAX_TRACKED_CLIENTS) {
      const oldest = this.#clients.keys().next().value;
      if (oldest !== undefined) this.#clients.delete(oldest);
    }
    this.#clients.set(client, { failures: 1, since: this.#now() });
  }

  /** Forgets `client`'s failures (it gave the right credentials). */
  succeed(client: string): void {
    this.#clients.delete(client);
  }

  #current(client: string): { failures: number; since: number } | undefined {
    const entry = this.#clients.get(client);
    if (entry && this.#now() - entry.since >= AUTH_WINDOW_MS) {
      this.#clients.delete(client);
      return undefined;
    }
    return entry;
  }
}
