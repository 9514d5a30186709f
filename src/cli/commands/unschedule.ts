/**
 * `skiplock unschedule NAME`: removes a schedule (jobs it enqueued stay).
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type DatabaseCommandFlags, name } from '../flags.js';
import { printError, printJson, printText } from '../output.js';

/** The `unschedule` command. Exits 1 when there was no such schedule. */
export function unscheduleCommand(): Command {
  const command = new Command('unschedule')
    .summary('remove a recurring (cron) job')
    .description(
      'Removes the schedule NAME; jobs it already enqueued stay. Exits 1 when there is no such schedule.',
    )
    .argument('<NAME>', 'the schedule name', name);
  return addDatabaseCommandFlags(command, [
    'skiplock unschedule nightly-report',
    'skiplock unschedule nightly-report --json',
  ]).action(async (name: string, flags: DatabaseCommandFlags) => {
    await withDatabase(flags, async ({ skiplock }) => {
      if (!(await skiplock.unschedule(name))) {
        printError(`no schedule named ${JSON.stringify(name)}`);
        process.exitCode = 1;
      } else if (flags.json) printJson({ name, removed: true });
      else printText(`removed schedule ${name}`);
    });
  });
}
