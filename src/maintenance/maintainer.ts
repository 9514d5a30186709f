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
 * resolves `{ locked: false }` at once when another process holds it.
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
  );
}

/** What the maintenance loop needs. */
export interface MaintainerDeps {
  pool: pg.Pool;
  schema: string;
  services: readonly MaintenanceService[];
  onError(error: SkiplockError, service: MaintenanceTask): void;
}

/** The loop: each service when its interval comes round, one at a time. */
export class Maintainer {
  readonly #deps: MaintainerDeps;
  /** `performance.now()` at which each service is next due. */
  readonly #dueAt = new Map<MaintenanceService, number>();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  constructor(deps: MaintainerDeps) {
    this.#deps = deps;
  }

  /** Runs every service once now, then each on its interval. */
  start(): void {
    const now = performance.now();
    for (const service of this.#deps.services) this.#dueAt.set(service, now);
    this.#turn();
  }

  #turn(): void {
    if (this.#stopped || this.#running) return;
    this.#running = this.#runDue().finally(() => {
      this.#running = undefined;
      this.#arm();
    });
  }

  async #runDue(): Promise<void> {
    for (const service of this.#deps.services) {
      if (this.#stopped) return;
      if ((this.#dueAt.get(service) ?? 0) > performance.now()) continue;
      try {
        await withMaintenanceLock(this.#deps.pool, this.#deps.schema, service.name, (client) =>
          service.run(client),
        );
      } catch (error) {
        this.#deps.onError(translateError(error), service.name);
      }
      this.#dueAt.set(service, performance.now() + service.intervalMs);
    }
  }

  #arm(): void {
    clearTimeout(this.#timer);
    if (this.#stopped || this.#dueAt.size === 0) return;
    const next = Math.min(...this.#dueAt.values());
    this.#timer = setTimeout(() => this.#turn(), Math.max(0, next - performance.now()));
    this.#timer.unref();
  }

  /** Stops the loop; resolves when the running service (if any) is done. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }
}
