/**
 * `skiplock prune --older-than-ms N`: deletes finished jobs and archived ones
 * older than N milliseconds, in batches.
 */
import { Command } from 'commander';
import { MAX_RETENTION_MS, PRUNABLE_STATUSES, type PrunableStatus } from '../../db/queries/prune.js';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type ConnectionFlags, integer, repeatableChoice } from '../flags.js';
import { printJson, printText } from '../output.js';

interface PruneFlags extends ConnectionFlags {
  olderThanMs: number;
  status?: PrunableStatus[];
  json?: boolean;
}

/** The `prune` command. */
export function pruneCommand(): Command {
  const command = new Command('prune')
    .summary('delete old finished jobs')
    .description(
      'Deletes finished jobs (succeeded, failed, dead, cancelled) and archived jobs whose finished_at is older than --older-than-ms, 1000 rows per statement; whole archive days older than that are dropped as partitions.',
    )
    .requiredOption(
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
  return addDatabaseCommandFlags(command, [
    'skiplock prune --older-than-ms 604800000',
    'skiplock prune --older-than-ms 86400000 --status succeeded',
  ]).action(async (flags: PruneFlags) => {
    await withDatabase(flags, async ({ skiplock }) => {
      const result = await skiplock.prune({
        olderThanMs: flags.olderThanMs,
        ...(flags.status && { status: flags.status }),
      });
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
