/**
 * `skiplock schedules`: every schedule with its next run.
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addConnectionFlags, addJsonFlag, type ConnectionFlags, examples } from '../flags.js';
import { printJson, printText } from '../output.js';
import { renderTable } from '../table.js';

/** The `schedules` command. */
export function schedulesCommand(): Command {
  const command = new Command('schedules')
    .summary('list recurring (cron) jobs')
    .description(
      'Lists every schedule with its cron expression, time zone, kind, queue and next run (database clock).',
    );
  addConnectionFlags(command);
  addJsonFlag(command);
  return command
    .addHelpText('after', examples('skiplock schedules', 'skiplock schedules --json'))
    .action(async (flags: ConnectionFlags & { json?: boolean }) => {
      await withDatabase(flags, async ({ skiplock }) => {
        const schedules = await skiplock.schedules();
        if (flags.json) {
          printJson(schedules);
          return;
        }
        if (schedules.length === 0) {
          printText('no schedules');
          return;
        }
        printText(
          renderTable(
            ['name', 'cron', 'timezone', 'kind', 'queue', 'overlap', 'catch up', 'next run', 'last run'],
            schedules.map((s) => [
              s.name,
              s.cron,
              s.timezone,
              s.kind,
              s.queue,
              s.overlap,
              s.catchUp,
              s.nextRunAt.toISOString(),
              s.lastRunAt?.toISOString() ?? null,
            ]),
          ),
        );
      });
    });
}
