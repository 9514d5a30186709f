/**
 * The archive's partition upkeep, a service of the maintenance loop: keeps
 * day partitions of `jobs_archive` ready ahead of time (so archived rows
 * never land in the default partition) and, with an archive retention, drops
 * each day partition once its whole UTC day is older than the retention. A
 * drop removes a day's rows without DELETE, so it leaves no dead tuples.
 * Days are UTC days, so daylight saving time never shifts a partition.
 */
import type { JobQueries } from '../db/queries/jobs.js';
import type { ArchivePartitionsResult } from '../db/queries/prune.js';
import type { MaintenanceService } from './maintainer.js';

/** Days after today (UTC) whose partitions exist ahead of time. */
export const ARCHIVE_PARTITIONS_AHEAD_DAYS = 7;

/** How often the upkeep runs: hourly (and once at start), far more often than days turn. */
export const ARCHIVE_PARTITIONS_INTERVAL_MS = 3_600_000;

/**
 * The upkeep as a maintenance service. `retentionMs` undefined keeps every
 * partition; `onChanged` hears of every turn that created or dropped one.
 */
export function archivePartitionsService(
  queries: JobQueries,
  options: { retentionMs: number | undefined },
  onChanged: (result: ArchivePartitionsResult) => void,
): MaintenanceService {
  return {
    name: 'archive',
    intervalMs: ARCHIVE_PARTITIONS_INTERVAL_MS,
    async run(client) {
      const result = await queries.prune.partitions(
        client,
        null,
        ARCHIVE_PARTITIONS_AHEAD_DAYS,
        options.retentionMs,
      );
      if (result.created + result.dropped + result.skipped > 0) onChanged(result);
    },
  };
}
