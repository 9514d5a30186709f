/**
 * The pruner: retention for finished jobs. Deletes succeeded, failed, dead and
 * cancelled jobs, each status after its own age, and archived ones, whose
 * `finished_at` is older than that age, oldest first, in batches of
 * {@link PRUNE_BATCH_LIMIT} rows per statement, so no statement holds many
 * locks or runs long. As a service of the maintenance loop (worker options
 * `retention`, `retentionMs`), at most one prune runs at a time across all
 * workers. The archive's whole expired days are dropped by its partition
 * upkeep (archive-partitions.ts), not here.
 */
import type { Queryable } from '../db/executor.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { PRUNABLE_STATUSES, type PrunableStatus } from '../db/queries/prune.js';
import type { MaintenanceService } from './maintainer.js';

/** Rows deleted per statement. */
export const PRUNE_BATCH_LIMIT = 1000;

/** Batches per status in one turn of the maintenance loop; a larger backlog waits for the next turns. */
const SERVICE_BATCHES_PER_TURN = 10;

/** Statuses the periodic prune deletes after `retentionMs`: dead letters are kept for a person. */
export const SERVICE_PRUNE_STATUSES: readonly PrunableStatus[] = ['succeeded', 'failed', 'cancelled'];

/**
 * Retention ages, in milliseconds by `finished_at` (database clock): finished
 * rows of each status in the jobs table, and rows of the archive. A status
 * left out is kept forever.
 */
export interface Retention {
  /** Age after which succeeded jobs kept in the table (`onSuccess: 'keep'`) are deleted. */
  succeeded?: number | undefined;
  /** Age after which failed jobs (a permanent error) are deleted. */
  failed?: number | undefined;
  /** Age after which dead letters (out of attempts) are deleted. */
  dead?: number | undefined;
  /** Age after which cancelled jobs are deleted. */
  cancelled?: number | undefined;
  /**
   * Age after which archived jobs (`onSuccess: 'archive'`) are removed. The
   * worker's upkeep drops the archive's day partitions whole once their UTC
   * day ended this long ago, so an archived row lives between this age and
   * this age plus one day.
   */
  archive?: number | undefined;
}

/**
 * The ages in effect: `retention`'s own, else `retentionMs` for succeeded,
 * failed, cancelled and archived jobs (never for dead letters).
 */
export function resolveRetention(
  retention: Retention | undefined,
  retentionMs: number | undefined,
): Retention {
  const resolved: Retention = {};
  for (const key of [...PRUNABLE_STATUSES, 'archive'] as const) {
    const age = retention?.[key] ?? (key === 'dead' ? undefined : retentionMs);
    if (age !== undefined) resolved[key] = age;
  }
  return resolved;
}

/** What a prune deleted. */
export interface PruneResult {
  /** Rows deleted from the jobs table. */
  jobs: number;
  /** Rows deleted from the archive table (not counting those of dropped partitions). */
  archive: number;
  /** The archive's whole expired day partitions dropped (their rows are not counted in `archive`). */
  archivePartitions: number;
}

/**
 * Deletes matching rows batch by batch until a batch comes back short (or
 * after `maxBatches` per status and table). Each batch is its own statement;
 * on a pool, its own transaction. In the archive, whole expired day partitions
 * are dropped first (no dead tuples); the rows left older than the age (a
 * part of a day, or the default partition) are then deleted in batches.
 *
 * @param retention - the age of each status in the jobs table, and of the archive.
 * @param archiveStatuses - the statuses deleted from the archive (every row the
 *   library archives is `succeeded`; partitions are dropped only when it is listed).
 * @throws {DatabaseError} from the database (batches already done stay done).
 */
export async function prune(
  db: Queryable,
  queries: JobQueries,
  retention: Retention,
  archiveStatuses: readonly PrunableStatus[] = PRUNABLE_STATUSES,
  maxBatches = Number.POSITIVE_INFINITY,
): Promise<PruneResult> {
  const result: PruneResult = { jobs: 0, archive: 0, archivePartitions: 0 };
  const batches = async (step: () => Promise<number>) => {
    let total = 0;
    for (let batch = 0; batch < maxBatches; batch++) {
      const deleted = await step();
      total += deleted;
      if (deleted < PRUNE_BATCH_LIMIT) break;
    }
    return total;
  };
  for (const status of PRUNABLE_STATUSES) {
    const age = retention[status];
    if (age === undefined) continue;
    result.jobs += await batches(() => queries.prune.jobs(db, [status], age, PRUNE_BATCH_LIMIT));
  }
  const archiveAge = retention.archive;
  if (archiveAge !== undefined && archiveStatuses.length > 0) {
    if (archiveStatuses.includes('succeeded')) {
      result.archivePartitions = (await queries.prune.partitions(db, null, 0, archiveAge)).dropped;
    }
    result.archive = await batches(() =>
      queries.prune.archive(db, archiveStatuses, archiveAge, PRUNE_BATCH_LIMIT),
    );
  }
  return result;
}

/**
 * The pruner as a maintenance service, when any retention is set (else none);
 * `onPruned` hears of every turn that deleted rows. In the archive it deletes
 * only from the default partition: whole days go with their partitions.
 */
export function prunerServices(
  queries: JobQueries,
  options: { pruneIntervalMs: number; retention: Retention },
  onPruned: (result: PruneResult) => void,
): MaintenanceService[] {
  const { retention } = options;
  if (Object.keys(retention).length === 0) return [];
  const hot: Retention = { ...retention };
  delete hot.archive;
  return [
    {
      name: 'prune',
      intervalMs: options.pruneIntervalMs,
      async run(client) {
        const result = await prune(client, queries, hot, [], SERVICE_BATCHES_PER_TURN);
        const archiveAge = retention.archive;
        if (archiveAge !== undefined) {
          for (let batch = 0; batch < SERVICE_BATCHES_PER_TURN; batch++) {
            const deleted = await queries.prune.archiveDefault(
              client,
              PRUNABLE_STATUSES,
              archiveAge,
              PRUNE_BATCH_LIMIT,
            );
            result.archive += deleted;
            if (deleted < PRUNE_BATCH_LIMIT) break;
          }
        }
        if (result.jobs + result.archive > 0) onPruned(result);
      },
    },
  ];
}
