/**
 * The worker's dedicated LISTEN connection for wake-ups. It reconnects by
 * itself with backoff after any error or server restart, and reports each
 * (re)connection so that the worker polls once: notifications sent while it was
 * away are lost, by PostgreSQL's design.
 *
 * It also checks that it hears: right after LISTEN and then on an interval, a
 * probe wake-up is sent from another connection, and must come back within a
 * deadline. A connection that hears nothing (a half-open socket, or LISTEN
 * issued through a transaction pooler, whose server connection goes back to
 * the pool) is reported as deaf and replaced; the worker's poll covers the gap.
 *
 * {@link workerNotifier} routes each message to the part of the worker it
 * concerns (limits, wake-ups of its queues and resume to the claim loop,
 * cancel/pause to the cancellation) and warns once per spell of a deaf
 * listener. Any role that can connect can send on the channel, so every
 * message is a hint: what it leads to is read from the database, and a flood
 * of them is coalesced (see the claim loop and the cancellation).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { translateError } from '../db/executor.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { quoteIdent } from '../db/sql.js';
import { destroySocket } from '../db/statement-deadline.js';
import { parseWakeUp, type WakeUp } from '../db/wake-up.js';
import type { SkiplockError } from '../errors.js';
import { type Clock, sleep } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';
import type { Cancellation } from './cancellation.js';
import type { ClaimLoop } from './claim-loop.js';
import type { EventReporter } from './events.js';
import { loopBackoffMs } from './loop-backoff.js';
import type { ResolvedWorkerOptions } from './options.js';
import { deafListenerWarning } from './server-check.js';
import { settlesWithin } from './worker-pool.js';

/** The part of a `pg.Client` the notifier uses. */
export type ListenClient = Pick<pg.Client, 'connect' | 'query' | 'end' | 'on'>;

/** What a {@link Notifier} reports to, and how it probes. */
export interface NotifierDeps {
  onWakeUp(message: WakeUp): void;
  onListening(): void;
  onError(error: SkiplockError): void;
  /**
   * Sends a probe wake-up carrying `token`, on a connection other than the
   * listener's. Without it, the notifier does not probe.
   */
  sendProbe?(token: string): Promise<void>;
  /** Time between probes, in milliseconds. @default 30_000 */
  probeIntervalMs?: number;
  /** How long a sent probe may take to come back, in milliseconds. @default 2000 */
  probeTimeoutMs?: number;
  /** A probe came back: the connection hears. */
  onHeard?(): void;
  /** A probe did not come back within the deadline; the connection is being replaced. */
  onDeaf?(probeTimeoutMs: number): void;
  /** Makes the client of each connection attempt. @default `new pg.Client(config)` */
  newClient?(config: pg.ClientConfig): ListenClient;
}

/** How long a sent probe may take to come back by default. */
export const PROBE_TIMEOUT_MS = 2_000;

/**
 * Holds one LISTEN connection on `channel` until stopped, reconnecting after
 * a pause that grows with each failure in a row (`wake()` ends the pause).
 */
export class Notifier extends Service {
  readonly #config: pg.ClientConfig;
  readonly #channel: string;
  readonly #deps: NotifierDeps;
  #client: ListenClient | undefined;
  readonly #attempted: Promise<void>;
  #firstAttempt!: () => void;
  /** The token of the probe in flight, and what to call when it comes back. */
  #awaited: { token: string; heard: () => void } | undefined;

  /** @param clock - times the reconnect pauses, the probes and stop(); defaults to the process's clock. */
  constructor(config: pg.ClientConfig, channel: string, deps: NotifierDeps, clock?: Clock) {
    super(clock);
    this.#config = { connectionTimeoutMillis: 10_000, query_timeout: 10_000, ...config, keepAlive: true };
    this.#channel = channel;
    this.#deps = deps;
    this.#attempted = new Promise<void>((resolve) => {
      this.#firstAttempt = resolve;
    });
  }

  /**
   * Starts listening; resolves after the first attempt, whether it connected
   * or not (it keeps trying). After stop(), resolves at once.
   */
  override start(): Promise<void> {
    super.start();
    return this.state === 'running' ? this.#attempted : Promise.resolve();
  }

  protected async run(): Promise<void> {
    try {
      await this.#listen();
    } finally {
      this.#firstAttempt();
    }
  }

  async #listen(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      const client = this.#deps.newClient?.(this.#config) ?? new pg.Client(this.#config);
      const ended = new Promise<unknown>((resolve) => {
        client.on('error', resolve);
        client.on('end', () => resolve(new Error('LISTEN connection ended')));
      });
      client.on('notification', (message) => {
        if (message.channel !== this.#channel) return;
        const wakeUp = parseWakeUp(message.payload);
        if (wakeUp.type !== 'probe') this.#deps.onWakeUp(wakeUp);
        else if (wakeUp.queue !== null && wakeUp.queue === this.#awaited?.token) this.#awaited.heard();
      });
      const watching = new AbortController();
      try {
        this.#client = client;
        await client.connect();
        await client.query(`LISTEN ${quoteIdent(this.#channel)}`);
        if (!this.#deps.sendProbe) failures = 0;
        this.#firstAttempt();
        this.#deps.onListening();
        const reason = await Promise.race([
          ended,
          abortPromise(this.stopSignal),
          this.#watch(watching.signal, () => {
            failures = 0;
          }),
        ]);
        if (this.stopped) break;
        throw reason;
      } catch (error) {
        this.#firstAttempt();
        // A deaf connection may be half-open: a polite end could wait on it forever.
        if (error instanceof DeafError) destroySocket(client);
        client.end().catch(() => {});
        if (this.stopped) break;
        if (error instanceof DeafError) this.#deps.onDeaf?.(error.timeoutMs);
        else this.#deps.onError(translateError(error));
        // Kept alive: while the database is away, this pause may be all the worker is waiting on.
        await this.wait(loopBackoffMs(failures++), { keepAlive: true });
      } finally {
        watching.abort();
        this.#awaited = undefined;
      }
    }
  }

  /**
   * Probes now and then every interval until `signal` aborts; resolves with a
   * {@link DeafError} when a probe does not come back in time. Never resolves
   * without a probe.
   */
  async #watch(signal: AbortSignal, onHeard: () => void): Promise<DeafError> {
    const { sendProbe, probeIntervalMs = 30_000, probeTimeoutMs: timeoutMs = PROBE_TIMEOUT_MS } = this.#deps;
    if (!sendProbe) return new Promise<never>(() => {});
    while (!signal.aborted) {
      const token = `probe:${randomBytes(8).toString('hex')}`;
      const heard = new Promise<true>((resolve) => {
        this.#awaited = { token, heard: () => resolve(true) };
      });
      let sent = true;
      try {
        await sendProbe(token);
      } catch {
        // The other connection's trouble, not the listener's: its own loop reports it.
        sent = false;
      }
      if (sent) {
        // The deadline runs from the commit of the probe, so a slow pool does not make a listener deaf.
        const timer = sleep(this.clock, timeoutMs, signal).then(() => false as const);
        if (!(await Promise.race([heard, timer]))) {
          if (signal.aborted) break;
          return new DeafError(timeoutMs);
        }
        this.#awaited = undefined;
        onHeard();
        this.#deps.onHeard?.();
      }
      await sleep(this.clock, probeIntervalMs, signal);
    }
    return new Promise<never>(() => {});
  }

  /**
   * Stops listening and closes the connection; resolves within `timeoutMs`,
   * destroying a connection that does not answer in time.
   */
  override async stop(timeoutMs = 2_000): Promise<void> {
    const deadline = this.clock.monotonic() + timeoutMs;
    const left = () => Math.max(0, deadline - this.clock.monotonic());
    const loop = super.stop();
    const client = this.#client;
    // The loop ends at once unless it is connecting; half the time is left for the polite end.
    if (!(await settlesWithin(loop, left() / 2, this.clock)) && client) destroySocket(client);
    if (client && !(await settlesWithin(client.end(), left(), this.clock))) destroySocket(client);
    await settlesWithin(loop, left(), this.clock);
  }
}

/**
 * The LISTEN connection's settings: the worker's, or a URL of its own (a
 * direct connection past a transaction pooler), keeping the worker's TLS
 * settings and application name.
 */
export function listenClientConfig(config: pg.ClientConfig, connectionString?: string): pg.ClientConfig {
  if (connectionString === undefined) return config;
  return {
    connectionString,
    ...(config.ssl !== undefined ? { ssl: config.ssl } : {}),
    ...(config.application_name !== undefined ? { application_name: config.application_name } : {}),
  };
}

/** The parts of a worker its messages go to. */
export interface WorkerNotifierDeps {
  clientConfig: pg.ClientConfig;
  options: ResolvedWorkerOptions;
  queries: JobQueries;
  /** The worker's pool, which sends the probes. */
  pool: Pick<pg.Pool, 'query'>;
  claimLoop: ClaimLoop;
  cancellation: Cancellation;
  events: EventReporter;
  /** Times the reconnect pauses, the probes and stop(). @default the process's clock */
  clock?: Clock;
}

/** The notifier of one worker, its messages routed. */
export function workerNotifier(deps: WorkerNotifierDeps): Notifier {
  const { options, queries, claimLoop, cancellation, events } = deps;
  /** The LISTEN connection missed a probe and no probe has come back since (warned once). */
  let deaf = false;
  const listenConfig = listenClientConfig(deps.clientConfig, options.listenConnectionString);
  return new Notifier(
    listenConfig,
    queries.channel,
    {
      onWakeUp: (message) => {
        if (message.type === 'limits') return claimLoop.onLimitsMessage(message.queue);
        if (cancellation.onMessage(message)) return;
        if (message.queue === null || options.queues.includes(message.queue)) {
          claimLoop.onWakeUp(message.queue);
          claimLoop.hint(message.delayMs);
        }
      },
      onListening: () => {
        events.emit('worker:listen');
        claimLoop.wake();
      },
      onError: (error) => events.error(error, 'notifier'),
      sendProbe: (token) => queries.probe.send(deps.pool, token),
      probeIntervalMs: options.listenProbeIntervalMs,
      onHeard: () => {
        deaf = false;
      },
      onDeaf: (timeoutMs) => {
        if (deaf) return;
        deaf = true;
        events.warn(deafListenerWarning(timeoutMs, options.pollIntervalMs));
      },
    },
    deps.clock,
  );
}

/** A probe that did not come back: the connection hears nothing. */
class DeafError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`the LISTEN connection did not hear its probe within ${timeoutMs} ms`);
  }
}

function abortPromise(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
}
