/**
 * The maintenance loop a worker runs: the sweeper always, the scheduler (cron
 * slots) unless turned off, the pruner when a retention is set, the archive's
 * partition upkeep and the success policy of parents kept for their children
 * always. Each service takes its turn under its own advisory
 * lock (see maintainer.ts).
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import type { ArchivePartitionsResult } from '../db/queries/prune.js';
import type { MaintenanceTask } from '../db/sql.js';
import type { SkiplockError } from '../errors.js';
import { schedulerService } from '../schedule/scheduler.js';
import { archivePartitionsService } from './archive-partitions.js';
import { keptParentsService } from './kept-parents.js';
import { Maintainer, maintenanceLock } from './maintainer.js';
import { type PruneResult, prunerServices, type Retention } from './pruner.js';
import { type SweptJobs, sweeperService } from './sweeper.js';

/** What the worker's maintenance needs to know and tell. */
export interface WorkerMaintenanceOptions {
  pool: pg.Pool;
  queries: JobQueries;
  sweepIntervalMs: number;
  visibilityTimeoutMs: number;
  /** Run the scheduler too. */
  schedules: boolean;
  /** Retention of finished jobs and of the archive, by status (nothing is pruned when empty). */
  retention: { pruneIntervalMs: number; retention: Retention };
  onSwept(result: SweptJobs): void;
  onPruned(result: PruneResult): void;
  onArchivePartitions(result: ArchivePartitionsResult): void;
  onError(error: SkiplockError, service: MaintenanceTask): void;
  /** Something the operator should fix (a parked schedule). */
  onWarning(message: string): void;
}

/**
 * How long a starting worker's maintenance waits before its first pass: its
 * passes (a sweep, the schedules, the pruner) would otherwise run beside the
 * worker's first claims and slow the start of a backlog, for nothing a
 * second's wait loses.
 */
export const MAINTENANCE_START_DELAY_MS = 1_000;

/** Makes the worker's maintenance loop (not started); its first pass runs {@link MAINTENANCE_START_DELAY_MS} after start. */
export function workerMaintenance(options: WorkerMaintenanceOptions): Maintainer {
  const { queries } = options;
  const sweeper = sweeperService(
    queries,
    { intervalMs: options.sweepIntervalMs, defaultVisibilityTimeoutMs: options.visibilityTimeoutMs },
    options.onSwept,
  );
  return new Maintainer({
    lock: maintenanceLock(options.pool, queries.names.schema),
    services: [
      sweeper,
      ...(options.schedules
        ? [
            schedulerService(queries, ({ name, reason }) =>
              options.onWarning(
                `schedule ${JSON.stringify(name)} parked, no jobs until its row is updated (schedule() or UPDATE): ${reason}`,
              ),
            ),
          ]
        : []),
      ...prunerServices(queries, options.retention, options.onPruned),
      archivePartitionsService(
        queries,
        { retentionMs: options.retention.retention.archive },
        options.onArchivePartitions,
      ),
      keptParentsService(queries, { intervalMs: options.sweepIntervalMs }),
    ],
    onError: options.onError,
    startDelayMs: MAINTENANCE_START_DELAY_MS,
  });
}
