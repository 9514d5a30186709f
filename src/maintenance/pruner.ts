/**
 * The pruner: retention for finished jobs. Deletes succeeded, failed, dead and
 * cancelled jobs, and archived ones, whose `finished_at` is older than a given
 * age, oldest first, in batches of {@link PRUNE_BATCH_LIMIT} rows per
 * statement, so no statement holds many locks or runs long. As a service of
 * the maintenance loop (worker option `retentionMs`), at most one prune runs
 * at a time across all workers.
 */
import type { Queryable } from '../db/executor.js';
import type { JobQueries } from '../db/queries/jobs.js';
import type { PrunableStatus } from '../db/queries/prune.js';
import type { MaintenanceService } from './maintainer.js';

/** Rows deleted per statement. */
export const PRUNE_BATCH_LIMIT = 1000;

/** Batches per table in one turn of the maintenance loop; a larger backlog waits for the next turns. */
const SERVICE_BATCHES_PER_TURN = 10;

/** Statuses the periodic prune deletes: dead letters are kept for a person. */
export const SERVICE_PRUNE_STATUSES: readonly PrunableStatus[] = ['succeeded', 'failed', 'cancelled'];

/** What a prune deleted. */
export interface PruneResult {
  /** Rows deleted from the jobs table. */
  jobs: number;
  /** Rows deleted from the archive table. */
  archive: number;
}

/**
 * Deletes matching rows batch by batch until a batch comes back short (or
 * after `maxBatches` per table). Each batch is its own statement; on a pool,
 * its own transaction.
 *
 * @throws {DatabaseError} from the database (batches already done stay done).
 */
export async function prune(
  db: Queryable,
  queries: JobQueries,
  statuses: readonly PrunableStatus[],
  olderThanMs: number,
  maxBatches = Number.POSITIVE_INFINITY,
): Promise<PruneResult> {
  const result: PruneResult = { jobs: 0, archive: 0 };
  for (const table of ['jobs', 'archive'] as const) {
    for (let batch = 0; batch < maxBatches; batch++) {
      const deleted = await queries.prune[table](db, statuses, olderThanMs, PRUNE_BATCH_LIMIT);
      result[table] += deleted;
      if (deleted < PRUNE_BATCH_LIMIT) break;
    }
  }
  return result;
}

/**
 * The pruner as a maintenance service, when `retentionMs` is set (else none);
 * `onPruned` hears of every turn that deleted rows.
 */
export function prunerServices(
  queries: JobQueries,
  options: { pruneIntervalMs: number; retentionMs: number | undefined },
  onPruned: (result: PruneResult) => void,
): MaintenanceService[] {
  const { retentionMs } = options;
  if (retentionMs === undefined) return [];
  return [
    {
      name: 'prune',
      intervalMs: options.pruneIntervalMs,
      async run(client) {
        const result = await prune(
          client,
          queries,
          SERVICE_PRUNE_STATUSES,
          retentionMs,
          SERVICE_BATCHES_PER_TURN,
        );
        if (result.jobs + result.archive > 0) onPruned(result);
      },
    },
  ];
}
