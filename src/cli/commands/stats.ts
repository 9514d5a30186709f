/**
 * `skiplock stats`: jobs per queue and status, and the oldest due job's age.
 */
import { Command } from 'commander';
import { JOB_STATUSES } from '../../job/job.js';
import type { RelayQueueStats } from '../../skiplock.js';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type DatabaseCommandFlags } from '../flags.js';
import { printJson, printText } from '../output.js';
import { formatDuration, renderTable } from '../table.js';

/** The `stats` command. */
export function statsCommand(): Command {
  const command = new Command('stats')
    .summary('jobs per queue and status')
    .description(
      'Counts jobs per queue and status (≈n: estimated from a sample, for 10,000 or more finished jobs); "oldest due" is how long the oldest queued job has been due (a growing value means workers are behind). While relays run, a second table lists the relayed queues: jobs waiting to be relayed, the lag (how long the oldest of them has been due) and jobs in flight (--json prints only the first table).',
    );
  return addDatabaseCommandFlags(command, [
    'skiplock stats',
    'skiplock stats --json | jq \'.[] | select(.status == "dead")\'',
  ]).action(async (flags: DatabaseCommandFlags) => {
    await withDatabase(flags, async ({ skiplock }) => {
      const stats = await skiplock.stats();
      if (flags.json) {
        printJson(stats);
        return;
      }
      const relayed = await skiplock.relayStats();
      if (stats.length === 0) {
        printText('no jobs');
        printRelayed(relayed);
        return;
      }
      const queues = [...new Set(stats.map((s) => s.queue))];
      const rows = queues.map((queue) => {
        const of = stats.filter((s) => s.queue === queue);
        const oldest = of.find((s) => s.status === 'queued')?.oldestQueuedAgeMs ?? null;
        return [
          queue,
          // A count estimated from a sample (a large group of finished jobs) reads ≈n.
          ...JOB_STATUSES.map((status) => {
            const row = of.find((s) => s.status === status);
            return row?.estimated ? `≈${row.count}` : (row?.count ?? 0);
          }),
          oldest === null ? null : formatDuration(oldest),
        ];
      });
      printText(renderTable(['queue', ...JOB_STATUSES, 'oldest due'], rows));
      printRelayed(relayed);
    });
  });
}

/** The relayed queues' table, after a blank line; nothing when no relay runs. */
function printRelayed(relayed: RelayQueueStats[]): void {
  if (relayed.length === 0) return;
  printText('');
  printText(
    renderTable(
      ['relayed queue', 'relays', 'waiting', 'lag', 'in flight', 'published'],
      relayed.map((r) => [
        r.queue,
        r.relays,
        r.waiting,
        r.lagMs === null ? null : formatDuration(r.lagMs),
        r.inFlight,
        r.published,
      ]),
    ),
  );
}
