/**
 * `skiplock schedules`: every schedule with its next run.
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type DatabaseCommandFlags } from '../flags.js';
import { printJson, printText } from '../output.js';
import { renderTable } from '../table.js';

/** The `schedules` command. */
export function schedulesCommand(): Command {
  const command = new Command('schedules')
    .summary('list recurring (cron) jobs')
    .description(
      'Lists every schedule with its cron expression, time zone, kind, queue and next run (database clock). A schedule the scheduler parked (its row does not parse, e.g. stored by plain SQL) shows "parked" as its next run and why in the last column; it enqueues nothing until `skiplock schedule` (or an UPDATE of its row) fixes it.',
    );
  return addDatabaseCommandFlags(command, ['skiplock schedules', 'skiplock schedules --json']).action(
    async (flags: DatabaseCommandFlags) => {
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
            [
              'name',
              'cron',
              'timezone',
              'kind',
              'queue',
              'overlap',
              'catch up',
              'next run',
              'last run',
              'parked',
            ],
            schedules.map((s) => [
              s.name,
              s.cron,
              s.timezone,
              s.kind,
              s.queue,
              s.overlap,
              s.catchUp,
              s.parkedReason === null ? s.nextRunAt.toISOString() : 'parked',
              s.lastRunAt?.toISOString() ?? null,
              s.parkedReason,
            ]),
          ),
        );
      });
    },
  );
}
