/**
 * One maintenance loop per worker. Its services (the sweeper now; more as they
 * come) take turns: one runs at a time in this process, each on its own
 * interval, and each in a transaction that first tries its own
 * transaction-scoped advisory lock, so across all processes at most one runs a
 * given service at a time and the others skip that turn. The lock ends with
 * the transaction, and the transaction cannot idle, so a frozen or dead process
 * never stops the others.
 */
import type pg from 'pg';
import { translateError, withTransaction } from '../db/executor.js';
import { advisoryLockKey, type MaintenanceTask } from '../db/sql.js';
import type { SkiplockError } from '../errors.js';
import type { Clock } from '../runtime/clock.js';
import { Service } from '../runtime/service.js';

/** A periodic task of the maintenance loop. */
export interface MaintenanceService {
  name: MaintenanceTask;
  /** Time between runs, in milliseconds. */
  intervalMs: number;
  /** One run, inside the transaction that holds the service's advisory lock. */
  run(client: pg.PoolClient): Promise<void>;
}

/** Longest a maintenance transaction may idle between statements. */
const MAINTENANCE_IDLE_TIMEOUT_MS = 10_000;

/**
 * Runs `fn` in a transaction holding `task`'s advisory lock for `schema`;
 * resolves `{ locked: false }` at once when another process holds it. The
 * transaction is READ COMMITTED whatever the server's default, since the
 * passes rely on each statement seeing what others committed meanwhile (the
 * kept parents' pass re-reads their children after locking them).
 *
 * @throws {DatabaseError} when the database cannot be reached.
 */
export function withMaintenanceLock<T>(
  pool: pg.Pool,
  schema: string,
  task: MaintenanceTask,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<{ locked: false } | { locked: true; result: T }> {
  return withTransaction(
    pool,
    async (client) => {
      const { rows } = await client.query<{ locked: boolean }>(
        'SELECT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended($1, 0)) AS locked',
        [advisoryLockKey(task, schema)],
      );
      if (!rows[0]?.locked) return { locked: false as const };
      return { locked: true as const, result: await fn(client) };
    },
    MAINTENANCE_IDLE_TIMEOUT_MS,
    true,
  );
}

/**
 * Runs `fn` in a transaction holding `task`'s advisory lock, or skips it when
 * another process holds the lock ({@link withMaintenanceLock} bound to a pool
 * and schema).
 */
export type MaintenanceLock = (
  task: MaintenanceTask,
  fn: (client: pg.PoolClient) => Promise<void>,
) => Promise<unknown>;

/** The advisory locks of `schema`'s maintenance, taken on `pool`. */
export function maintenanceLock(pool: pg.Pool, schema: string): MaintenanceLock {
  return (task, fn) => withMaintenanceLock(pool, schema, task, fn);
}

/** What the maintenance loop needs. */
export interface MaintainerDeps {
  /** Where each service runs: in a transaction under its advisory lock. */
  lock: MaintenanceLock;
  services: readonly MaintenanceService[];
  onError(error: SkiplockError, service: MaintenanceTask): void;
  /**
   * How long after start each service first runs, in milliseconds; a service
   * whose interval is shorter first runs after its interval. @default 0
   */
  startDelayMs?: number;
}

/**
 * The loop: every service once shortly after start (`startDelayMs`, or its
 * interval when shorter), then each when its interval (from the end of its
 * last run) comes round, one at a time.
 */
export class Maintainer extends Service {
  readonly #deps: MaintainerDeps;
  /** Monotonic time ({@link Clock.monotonic}) at which each service is next due. */
  readonly #dueAt = new Map<MaintenanceService, number>();

  constructor(deps: MaintainerDeps, clock?: Clock) {
    super(clock);
    this.#deps = deps;
  }

  /**
   * Makes `task` (every service, without it) due now and ends the wait in
   * progress; it runs after the service running now, if any.
   */
  override wake(task?: MaintenanceTask): void {
    const now = this.clock.monotonic();
    for (const service of this.#deps.services) {
      if (task === undefined || service.name === task) this.#dueAt.set(service, now);
    }
    super.wake();
  }

  protected async run(): Promise<void> {
    const startedAt = this.clock.monotonic();
    const delayMs = this.#deps.startDelayMs ?? 0;
    for (const service of this.#deps.services) {
      this.#dueAt.set(service, startedAt + Math.min(delayMs, service.intervalMs));
    }
    while (!this.stopped) {
      await this.#runDue();
      // A service that came due during another's run runs now.
      const delayMs = Math.min(...this.#dueAt.values()) - this.clock.monotonic();
      if (delayMs > 0) await this.wait(delayMs);
    }
  }

  async #runDue(): Promise<void> {
    for (const service of this.#deps.services) {
      if (this.stopped) return;
      if ((this.#dueAt.get(service) ?? 0) > this.clock.monotonic()) continue;
      try {
        await this.#deps.lock(service.name, (client) => service.run(client));
      } catch (error) {
        this.#deps.onError(translateError(error), service.name);
      }
      this.#dueAt.set(service, this.clock.monotonic() + service.intervalMs);
    }
  }
}
