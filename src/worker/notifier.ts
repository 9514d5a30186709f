/**
 * The worker's dedicated LISTEN connection for wake-ups. It reconnects by
 * itself with backoff after any error or server restart, and reports each
 * (re)connection so that the worker polls once: notifications sent while it was
 * away are lost, by PostgreSQL's design.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { translateError } from '../db/executor.js';
import { quoteIdent } from '../db/sql.js';
import { parseWakeUp, type WakeUp } from '../db/wake-up.js';
import type { SkiplockError } from '../errors.js';
import { loopBackoffMs } from './loop-backoff.js';
import { destroySocket, settlesWithin } from './worker-pool.js';

/** Callbacks of a {@link Notifier}. */
export interface NotifierCallbacks {
  onWakeUp(message: WakeUp): void;
  onListening(): void;
  onError(error: SkiplockError): void;
}

/** Holds one LISTEN connection on `channel` until stopped. */
export class Notifier {
  readonly #config: pg.ClientConfig;
  readonly #channel: string;
  readonly #callbacks: NotifierCallbacks;
  readonly #stopped = new AbortController();
  #client: pg.Client | undefined;
  #loop: Promise<void> | undefined;

  constructor(config: pg.ClientConfig, channel: string, callbacks: NotifierCallbacks) {
    this.#config = { connectionTimeoutMillis: 10_000, query_timeout: 10_000, ...config, keepAlive: true };
    this.#channel = channel;
    this.#callbacks = callbacks;
  }

  /** Starts listening; resolves after the first attempt, whether it connected or not (it keeps trying). */
  start(): Promise<void> {
    let firstAttempt!: () => void;
    const attempted = new Promise<void>((resolve) => {
      firstAttempt = resolve;
    });
    this.#loop = this.#run(firstAttempt);
    return attempted;
  }

  async #run(firstAttempt: () => void): Promise<void> {
    let failures = 0;
    while (!this.#stopped.signal.aborted) {
      const client = new pg.Client(this.#config);
      const ended = new Promise<unknown>((resolve) => {
        client.on('error', resolve);
        client.on('end', () => resolve(new Error('LISTEN connection ended')));
      });
      client.on('notification', (message) => {
        if (message.channel === this.#channel) this.#callbacks.onWakeUp(parseWakeUp(message.payload));
      });
      try {
        this.#client = client;
        await client.connect();
        await client.query(`LISTEN ${quoteIdent(this.#channel)}`);
        failures = 0;
        firstAttempt();
        this.#callbacks.onListening();
        const reason = await Promise.race([ended, abortPromise(this.#stopped.signal)]);
        if (this.#stopped.signal.aborted) break;
        throw reason;
      } catch (error) {
        firstAttempt();
        client.end().catch(() => {});
        if (this.#stopped.signal.aborted) break;
        this.#callbacks.onError(translateError(error));
        await sleep(loopBackoffMs(failures++), undefined, { signal: this.#stopped.signal }).catch(() => {});
      }
    }
  }

  /** Stops listening and closes the connection, destroying it if it does not answer within `timeoutMs`. */
  async stop(timeoutMs = 2_000): Promise<void> {
    this.#stopped.abort();
    const client = this.#client;
    if (!(await settlesWithin(this.#loop ?? Promise.resolve(), timeoutMs)) && client) destroySocket(client);
    if (client && !(await settlesWithin(client.end(), timeoutMs))) destroySocket(client);
    await settlesWithin(this.#loop ?? Promise.resolve(), 1_000);
  }
}

function abortPromise(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
}
