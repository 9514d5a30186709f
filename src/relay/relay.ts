/**
 * The relay: hands the jobs of some queues to a broker. Producers enqueue as
 * always (the job commits with their data); the relay claims committed, due
 * jobs of its queues with SKIP LOCKED under a lease, publishes them, waits for
 * every acknowledgement, and only then deletes them, fenced by its lease. A
 * relay killed at any point leaves its jobs `running`: the sweeper gives them
 * back after the relay's visibility timeout and they are published again under
 * the same message id, which the broker drops as a duplicate.
 */

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { inspect } from 'node:util';
import { z } from 'zod';
import { translateError } from '../db/executor.js';
import { RelayQueries } from '../db/queries/relay.js';
import { schemaNames } from '../db/queries/schema-names.js';
import { SkiplockError, ValidationError } from '../errors.js';
import { DEFAULT_QUEUE } from '../job/defaults.js';
import { describeFailure, truncated } from '../job/failure.js';
import { assertName, type JobMap } from '../job/job.js';
import { durationMs, integerInRange, parseOptions } from '../options.js';
import type { Clock } from '../runtime/clock.js';
import { emitError, emitGuarded } from '../runtime/guarded-events.js';
import { Service } from '../runtime/service.js';
import type { Skiplock } from '../skiplock.js';
import { forgetOnSignals, stopOnSignals } from '../worker/signals.js';
import { type RelayedJob, readNamespace, toRelayedJob } from './message.js';

/** A broker the relay publishes to (`natsTarget(…)`, `rabbitmqTarget(…)`). */
export interface RelayTarget {
  /** The broker's name, for logs (`nats`, `rabbitmq`). */
  readonly name: string;
  /**
   * Connects, and creates or checks what the target publishes to, giving up
   * after about `timeoutMs` milliseconds (the relay passes its
   * `publishTimeoutMs`, so a stop during a connect stays bounded). Called again
   * after a failure.
   */
  connect(timeoutMs?: number): Promise<void>;
  /**
   * Publishes `jobs` (in this order) and resolves with what became of them:
   * the ids the broker acknowledged (removed from the jobs table), and the ids
   * it can never take, with why (ended `failed`); a job in neither is given
   * back and published again later. Rejects only when the connection is unusable.
   */
  publish(jobs: readonly RelayedJob[], timeoutMs: number): Promise<RelayPublishResult>;
  /**
   * Closes the connection, waiting at most `timeoutMs` milliseconds for the
   * broker to see what was sent, then dropping it (a broker that stopped
   * answering never holds a stop up).
   */
  close(timeoutMs: number): Promise<void>;
}

/** What a {@link RelayTarget} made of one batch. */
export interface RelayPublishResult {
  /** Ids of the jobs the broker acknowledged. */
  acknowledged: ReadonlySet<string>;
  /**
   * Ids of the jobs the broker can never take as they are (a message larger
   * than the server accepts, a queue name longer than it allows), each with
   * the reason; the relay ends them `failed` with it, to be requeued once the
   * broker takes them. Empty or absent when there are none.
   */
  refused?: ReadonlyMap<string, string>;
}

/** Options of {@link createRelay}. */
export interface RelayOptions {
  /** Where to publish. */
  target: RelayTarget;
  /** Queues to relay. @default ['default'] */
  queues?: string[];
  /** Most jobs claimed and published per round trip (1…10000). @default 100 */
  batchSize?: number;
  /**
   * Most batches published at once (1…64): the relay claims the next batch
   * while earlier ones wait for the broker's acknowledgements, so claims,
   * publishes and removals overlap. A group key's jobs still move one batch at
   * a time. 1 publishes strictly one batch after another. @default 4
   */
  maxBatchesInFlight?: number;
  /**
   * How long the relay waits before it looks again after a batch that was not
   * full, in milliseconds (1…2147483647): the longest a committed job waits to
   * be published. @default 200
   */
  lingerMs?: number;
  /**
   * Lease of a batch being published, in milliseconds (1000…2147483647): the
   * sweeper gives back the jobs of a relay that died after this long. Keep it
   * shorter than the broker's duplicate window. @default 60000
   */
  visibilityTimeoutMs?: number;
  /**
   * How long to wait for the broker's acknowledgements, in milliseconds; at
   * most half of `visibilityTimeoutMs`. @default 10000
   */
  publishTimeoutMs?: number;
  /** Pause after a database or broker error before trying again, in milliseconds. @default 1000 */
  retryDelayMs?: number;
  /**
   * How often the relay sweeps, in milliseconds (1…2147483647), as workers
   * do: the batches of a relay that died go back to `queued` once their lease
   * ran out, and queued jobs past their start deadline end `cancelled`. At
   * most one sweep runs at a time across relays and workers, so a deployment
   * of relays and broker-side workers alone needs no skiplock worker for it.
   * @default 60000
   */
  sweepIntervalMs?: number;
  /** Stop gracefully on SIGTERM/SIGINT. @default true */
  handleSignals?: boolean;
  /** Id recorded in `locked_by`. @default `relay:<hostname>:<pid>:<random>` */
  relayId?: string;
  /** The clock the loop waits on (tests pass a fake one). @default the process's clock */
  clock?: Clock;
}

/** The events a relay emits. */
export interface RelayEvents {
  /** A batch was acknowledged by the broker and removed from the jobs table. */
  'relay:publish': [jobs: RelayedJob[]];
  /** Jobs the broker did not acknowledge in time were given back, to be published again. */
  'relay:release': [count: number];
  /** A database or broker error; the relay retries by itself. */
  error: [error: SkiplockError, source: 'claim' | 'publish' | 'remove' | 'connect' | 'sweep' | 'listener'];
  /** The relay stopped. */
  'relay:stop': [];
}

/** Counters of a relay's work since it started. */
export interface RelayMetrics {
  /** Jobs published, acknowledged and removed. */
  published: number;
  /** Batches published. */
  batches: number;
  /** Jobs given back unpublished (broker error or timeout). */
  released: number;
  /** Jobs the broker can never take as they are, ended `failed`. */
  refused: number;
  /** Errors reported. */
  errors: number;
}

const optionsSchema = z.strictObject({
  target: z.custom<RelayTarget>(
    (v) =>
      typeof v === 'object' &&
      v !== null &&
      typeof (v as RelayTarget).publish === 'function' &&
      typeof (v as RelayTarget).connect === 'function',
    { error: 'must be a relay target (natsTarget(…) or rabbitmqTarget(…))' },
  ),
  queues: z.array(z.string()).min(1, { error: 'must name at least one queue' }).default([DEFAULT_QUEUE]),
  batchSize: integerInRange(1, 10_000).default(100),
  maxBatchesInFlight: integerInRange(1, 64).default(4),
  lingerMs: durationMs(1).default(200),
  visibilityTimeoutMs: durationMs(1000).default(60_000),
  publishTimeoutMs: durationMs(1).default(10_000),
  retryDelayMs: durationMs(1).default(1000),
  sweepIntervalMs: durationMs(1).default(60_000),
  handleSignals: z.boolean({ error: 'must be a boolean' }).default(true),
  relayId: z.string().min(1, { error: 'must not be empty' }).max(200).optional(),
  clock: z.custom<Clock>((v) => typeof v === 'object' && v !== null).optional(),
});

/** A running relay: `start()`, `stop()`, events, metrics. */
export class Relay extends EventEmitter<RelayEvents> {
  /** The id recorded in `locked_by` of the jobs it is publishing. */
  readonly id: string;
  /** Counters since start. */
  readonly metrics: RelayMetrics = { published: 0, batches: 0, released: 0, refused: 0, errors: 0 };
  readonly #loop: RelayLoop;
  readonly #handleSignals: boolean;
  readonly #targetName: string;

  /** Made by {@link createRelay}. */
  constructor(skiplock: Skiplock, options: RelayOptions) {
    super();
    const parsed = parseOptions(optionsSchema, options, 'relay');
    const { queues, visibilityTimeoutMs, publishTimeoutMs } = parsed;
    for (const [i, queue] of queues.entries()) assertName(queue, `relay.queues[${i}]`);
    this.id = parsed.relayId ?? `relay:${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    // A batch must be published and removed well within its lease, or the sweeper gives it back meanwhile.
    // The error names the option the caller gave, not the default it clashes with.
    if (publishTimeoutMs * 2 > visibilityTimeoutMs)
      throw options.publishTimeoutMs === undefined
        ? new ValidationError(
            'relay.visibilityTimeoutMs',
            `must be at least twice publishTimeoutMs (${publishTimeoutMs} ms, its default)`,
          )
        : new ValidationError(
            'relay.publishTimeoutMs',
            `must be at most half of visibilityTimeoutMs (${visibilityTimeoutMs} ms)`,
          );
    this.#handleSignals = parsed.handleSignals;
    this.#targetName = parsed.target.name;
    this.#loop = new RelayLoop(
      { ...parsed, skiplock, queues: [...new Set(queues)], relay: this },
      parsed.clock,
    );
  }

  #stopping: Promise<void> | undefined;

  /** The queues it relays. */
  get queues(): readonly string[] {
    return this.#loop.deps.queues;
  }

  /** Starts relaying (connects to the broker in the background; errors are `error` events). */
  start(): void {
    if (this.#loop.state !== 'new') return;
    if (this.#handleSignals) stopOnSignals(this);
    this.#loop.start();
  }

  /**
   * Stops: the batches in flight are published and removed (or given back) within
   * `publishTimeoutMs`, then the broker connection closes and `relay:stop` is
   * emitted. Idempotent; a relay stopped before it started emits nothing.
   */
  stop(): Promise<void> {
    // Once: a second call waits for the first; a relay never started has nothing to stop.
    this.#stopping ??= this.#stop(this.#loop.state !== 'new');
    return this.#stopping;
  }

  async #stop(started: boolean): Promise<void> {
    await this.#loop.stop();
    if (!started) return;
    await this.#loop.unregister();
    forgetOnSignals(this);
    await this.#loop.deps.target.close(this.#loop.deps.publishTimeoutMs).catch(() => {});
    this.emit('relay:stop');
  }

  /** @internal emits `event`; a listener that throws is reported as an `error` from source `listener`. */
  notify<K extends 'relay:publish' | 'relay:release'>(event: K, ...args: RelayEvents[K]): void {
    emitGuarded(this as EventEmitter, event, args, (error) => this.report(error, 'listener'));
  }

  /** @internal reports a background error. */
  report(error: unknown, source: RelayEvents['error'][1]): void {
    this.metrics.errors++;
    const translated =
      source === 'claim' || source === 'remove' || source === 'sweep' || error instanceof SkiplockError
        ? translateError(error)
        : new SkiplockError('BROKER', `${this.#targetName}: ${describeFailure(error)}`, { cause: error });
    emitError(this as EventEmitter, translated, source, `relay ${this.id}`);
  }
}

/** How often a relay renews its registration (the `relays` table), in milliseconds. */
const HEARTBEAT_INTERVAL_MS = 10_000;
/** A registration not renewed for this long no longer counts: the relay is gone. */
const REGISTRATION_TTL_MS = 3 * HEARTBEAT_INTERVAL_MS;

interface RelayDeps {
  skiplock: Skiplock;
  target: RelayTarget;
  queues: readonly string[];
  batchSize: number;
  maxBatchesInFlight: number;
  lingerMs: number;
  visibilityTimeoutMs: number;
  publishTimeoutMs: number;
  retryDelayMs: number;
  sweepIntervalMs: number;
  relay: Relay;
}

/**
 * The relay's loop: claim a batch, publish it, await the acks, remove it;
 * up to `maxBatchesInFlight` batches are between claim and removal at once.
 */
class RelayLoop extends Service {
  readonly deps: RelayDeps;
  readonly #queries: RelayQueries;
  #namespace: string | undefined;
  #connected = false;
  /** A batch failed to publish or to be removed: the loop pauses, then reconnects if need be. */
  #failed = false;
  /** Monotonic time of the last sweep; the first pass sweeps. */
  #sweptAt = Number.NEGATIVE_INFINITY;
  /** Monotonic time of the last registration; the first pass registers. */
  #registeredAt = Number.NEGATIVE_INFINITY;

  constructor(deps: RelayDeps, clock?: Clock) {
    super(clock);
    this.deps = deps;
    this.#queries = new RelayQueries(schemaNames(deps.skiplock.schema));
  }

  /** Deletes the relay's registration (it stopped); errors are reported. */
  async unregister(): Promise<void> {
    if (this.#registeredAt === Number.NEGATIVE_INFINITY) return;
    await this.#queries
      .unregister(this.deps.skiplock.pool, this.deps.relay.id)
      .catch((error: unknown) => this.deps.relay.report(error, 'remove'));
  }

  protected async run(): Promise<void> {
    // Batches being published and removed; each settles without rejecting.
    const inFlight = new Set<Promise<void>>();
    while (!this.stopped) {
      await this.#sweepWhenDue();
      if (this.#failed) {
        // A batch failed: let the others settle, then reconnect after the pause.
        await Promise.all(inFlight);
        this.#failed = false;
        await this.wait(this.deps.retryDelayMs);
        continue;
      }
      if (inFlight.size >= this.deps.maxBatchesInFlight) {
        await Promise.race(inFlight);
        continue;
      }
      let jobs: RelayedJob[];
      try {
        jobs = await this.#claim();
      } catch {
        // Reported where it happened; nothing was claimed.
        await this.wait(this.deps.retryDelayMs);
        continue;
      }
      if (jobs.length > 0) {
        const delivery: Promise<void> = this.#deliver(jobs)
          .catch(() => {
            this.#failed = true;
          })
          .finally(() => inFlight.delete(delivery));
        inFlight.add(delivery);
      }
      if (jobs.length < this.deps.batchSize) await this.wait(this.deps.lingerMs);
    }
    await Promise.all(inFlight);
  }

  /** Sweeps (under the maintenance lock that workers share) once `sweepIntervalMs` has passed; errors are reported. */
  async #sweepWhenDue(): Promise<void> {
    const now = this.clock.monotonic();
    if (now - this.#sweptAt < this.deps.sweepIntervalMs) return;
    this.#sweptAt = now;
    await this.deps.skiplock.sweep().catch((error: unknown) => this.deps.relay.report(error, 'sweep'));
  }

  /** A rejection handler that reports the error from `source`, then rethrows it. */
  #reported(source: RelayEvents['error'][1]): (error: unknown) => never {
    return (error) => {
      this.deps.relay.report(error, source);
      throw error;
    };
  }

  /**
   * Registers when due, connects when needed, and claims one batch, in the
   * order it is published. Errors are reported, then rethrown.
   */
  async #claim(): Promise<RelayedJob[]> {
    const { skiplock, target, relay } = this.deps;
    // Registered before the broker is reached: a relay that cannot publish still shows its lag.
    if (this.clock.monotonic() - this.#registeredAt >= HEARTBEAT_INTERVAL_MS) {
      await this.#queries
        .register(skiplock.pool, {
          id: relay.id,
          queues: this.deps.queues,
          target: target.name,
          published: relay.metrics.published,
          ttlMs: REGISTRATION_TTL_MS,
        })
        .catch(this.#reported('claim'));
      this.#registeredAt = this.clock.monotonic();
    }
    if (!this.#connected) {
      await target.connect(this.deps.publishTimeoutMs).catch(this.#reported('connect'));
      this.#connected = true;
    }
    this.#namespace ??= await readNamespace(this.#queries, skiplock.pool, skiplock.schema).catch(
      this.#reported('claim'),
    );
    const rows = await this.#queries
      .claim(skiplock.pool, {
        queues: this.deps.queues,
        limit: this.deps.batchSize,
        relayId: relay.id,
        visibilityTimeoutMs: this.deps.visibilityTimeoutMs,
      })
      .catch(this.#reported('claim'));
    // In claim order (the statement sorts, run_at to the microsecond), so the broker stores a batch highest priority first, then oldest.
    return rows.map((row) => toRelayedJob(row, this.#namespace!));
  }

  /**
   * Publishes one claimed batch, removes what the broker acknowledged, ends
   * `failed` what it can never take, and gives back the rest. Errors are
   * reported, then rethrown.
   */
  async #deliver(jobs: RelayedJob[]): Promise<void> {
    const { skiplock, target, relay } = this.deps;
    let acked: ReadonlySet<string> = new Set<string>();
    let refused: ReadonlyMap<string, string> = new Map<string, string>();
    // Another batch's publish failed and closed the connection: this one goes back unpublished, unreported.
    let publishFailed = !this.#connected;
    if (!publishFailed) {
      try {
        const result = publishResult(await target.publish(jobs, this.deps.publishTimeoutMs), target.name);
        acked = result.acknowledged;
        refused = result.refused ?? refused;
      } catch (error) {
        publishFailed = true;
        if (this.#connected) {
          this.#connected = false;
          this.#failed = true;
          await target.close(this.deps.publishTimeoutMs).catch(() => {});
          relay.report(error, 'publish');
        }
      }
    }
    // An acknowledged job was published, whatever else the target says of it.
    const published = jobs.filter((job) => acked.has(job.id));
    const refusedJobs = jobs.filter((job) => !acked.has(job.id) && refused.has(job.id));
    const unpublished = jobs.filter((job) => !acked.has(job.id) && !refused.has(job.id)).map((job) => job.id);
    // Only acknowledged jobs are deleted; a crash before this line publishes them again.
    if (published.length > 0) {
      await this.#queries
        .remove(
          skiplock.pool,
          published.map((job) => job.id),
          relay.id,
        )
        .catch(this.#reported('remove'));
      relay.metrics.published += published.length;
      relay.metrics.batches++;
      relay.notify('relay:publish', published);
    }
    if (unpublished.length > 0) {
      const released = await this.#queries
        .release(skiplock.pool, unpublished, relay.id)
        .catch(this.#reported('remove'));
      relay.metrics.released += released;
      relay.notify('relay:release', released);
    }
    if (refusedJobs.length > 0) await this.#refuse(refusedJobs, refused);
    if (unpublished.length > 0) {
      // Not in time, or not at all (a channel the broker closed): either way they go back.
      const error = new SkiplockError(
        'BROKER',
        `${unpublished.length} jobs were not acknowledged by the broker; given back to be published again`,
      );
      if (!publishFailed) relay.report(error, 'publish');
      throw error;
    }
  }

  /**
   * Ends `failed` the jobs the broker can never take, each with its reason
   * (so they stop coming back to every pass, and a person sees why), and
   * reports them once, from source `publish`.
   */
  async #refuse(jobs: readonly RelayedJob[], refused: ReadonlyMap<string, string>): Promise<void> {
    const { skiplock, target, relay } = this.deps;
    const ids = jobs.map((job) => job.id);
    // Stored as a last_error is: NUL escaped, well formed, cut at its length.
    const reasons = ids.map((id) => describeFailure(`${target.name} refuses it: ${String(refused.get(id))}`));
    const failed = await this.#queries
      .refuse(skiplock.pool, ids, reasons, relay.id)
      .catch(this.#reported('remove'));
    relay.metrics.refused += failed;
    const first = `job ${ids[0]}: ${truncated(reasons[0]!, 1000)}`;
    relay.report(
      new SkiplockError(
        'BROKER',
        ids.length === 1
          ? `${first}; it ended failed`
          : `${ids.length} jobs ended failed, the broker refusing them (${first}; …)`,
      ),
      'publish',
    );
  }
}

/**
 * `result`, when it is what {@link RelayTarget.publish} promises: `acknowledged`
 * a Set, `refused` absent (undefined or null) or a Map.
 *
 * @throws {SkiplockError} (code `BROKER`) naming the target, when it is not.
 */
function publishResult(result: unknown, targetName: string): RelayPublishResult {
  const r = result as { acknowledged?: unknown; refused?: unknown } | null | undefined;
  if (r?.acknowledged instanceof Set && (r.refused == null || r.refused instanceof Map))
    return { acknowledged: r.acknowledged, ...(r.refused instanceof Map ? { refused: r.refused } : {}) };
  throw new SkiplockError(
    'BROKER',
    `${targetName}: publish() resolved with ${inspect(result, { depth: 1, breakLength: Number.POSITIVE_INFINITY }).slice(0, 200)}, not { acknowledged: Set, refused?: Map }`,
  );
}

/**
 * Makes a relay from `skiplock`'s queues to a broker; call `start()`.
 *
 * @example
 * import { natsTarget } from 'skiplock/nats';
 * const relay = createRelay(skiplock, {
 *   target: natsTarget({ servers: 'nats://127.0.0.1:4222', stream: 'jobs' }),
 *   queues: ['emails'],
 * });
 * relay.start();
 *
 * @throws {ValidationError} naming the option (`relay.batchSize`…), also when
 *   `publishTimeoutMs` is more than half of `visibilityTimeoutMs`.
 */
export function createRelay<Jobs extends JobMap>(skiplock: Skiplock<Jobs>, options: RelayOptions): Relay {
  return new Relay(skiplock as unknown as Skiplock, options);
}
