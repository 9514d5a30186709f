/**
 * `skiplock prune --older-than-ms N`: deletes finished jobs and archived ones
 * older than N milliseconds, in batches; `--retention-<status> N` gives a
 * status (or the archive) an age of its own.
 */
import { Command } from 'commander';
import { MAX_RETENTION_MS, PRUNABLE_STATUSES, type PrunableStatus } from '../../db/queries/prune.js';
import type { Retention } from '../../maintenance/pruner.js';
import type { PruneFilter } from '../../operations/prune.js';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type ConnectionFlags, integer, repeatableChoice } from '../flags.js';
import { printJson, printText } from '../output.js';
import { addRetentionFlags, type RetentionFlags, retentionFromFlags } from '../retention-flags.js';
import { UsageError } from '../usage-error.js';

interface PruneFlags extends ConnectionFlags, RetentionFlags {
  olderThanMs?: number;
  status?: PrunableStatus[];
  json?: boolean;
}

/** The `prune` command. */
export function pruneCommand(): Command {
  const command = new Command('prune')
    .summary('delete old finished jobs')
    .description(
      'Deletes finished jobs (succeeded, failed, dead, cancelled) and archived jobs whose finished_at is older than --older-than-ms, 1000 rows per statement; whole archive days older than that are dropped as partitions. A --retention-<status> flag gives that status (or the archive) its own age; with those flags alone, only the statuses named are pruned.',
    )
    .option(
      '--older-than-ms <ms>',
      'age of finished_at beyond which rows are deleted',
      integer(0, MAX_RETENTION_MS),
    )
    .addOption(
      repeatableChoice(
        '--status <status>',
        'only this status (default: every finished one)',
        PRUNABLE_STATUSES,
      ),
    );
  addRetentionFlags(command);
  return addDatabaseCommandFlags(command, [
    'skiplock prune --older-than-ms 604800000',
    'skiplock prune --older-than-ms 86400000 --status succeeded',
    'skiplock prune --older-than-ms 604800000 --retention-dead 2592000000 --retention-archive 7776000000',
    'skiplock prune --retention-succeeded 86400000',
  ]).action(async (flags: PruneFlags) => {
    const filter = pruneFilter(flags);
    await withDatabase(flags, async ({ skiplock }) => {
      const result = await skiplock.prune(filter);
      if (flags.json) {
        printJson(result);
        return;
      }
      const days = result.archivePartitions;
      // Rows of a dropped day are not counted in `archive`: say how many days went.
      const dropped = days > 0 ? `, and dropped ${days} archive day partition${days === 1 ? '' : 's'}` : '';
      printText(
        `deleted ${result.jobs} job${result.jobs === 1 ? '' : 's'} and ${result.archive} archived${dropped}`,
      );
    });
  });
}

/**
 * The library's filter of the flags: `--older-than-ms` (with `--status`) as
 * it is, or with per-status flags an age per status, `--older-than-ms` for
 * those not named.
 *
 * @throws {UsageError} (exit 2) when no age is given, or `--status` is mixed with per-status flags.
 */
function pruneFilter(flags: PruneFlags): PruneFilter {
  const own = retentionFromFlags(flags);
  if (own === undefined) {
    if (flags.olderThanMs === undefined)
      throw new UsageError('give --older-than-ms <ms> or a --retention-<status> <ms> flag');
    return { olderThanMs: flags.olderThanMs, ...(flags.status && { status: flags.status }) };
  }
  if (flags.status)
    throw new UsageError(
      '--status cannot be combined with --retention-<status> flags: each names its status',
    );
  const retention: Retention = {};
  if (flags.olderThanMs !== undefined) {
    for (const key of [...PRUNABLE_STATUSES, 'archive'] as const) retention[key] = flags.olderThanMs;
  }
  return { retention: { ...retention, ...own } };
}
