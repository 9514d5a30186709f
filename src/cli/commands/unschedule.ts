/**
 * `skiplock unschedule NAME`: removes a schedule (jobs it enqueued stay).
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addConnectionFlags, type ConnectionFlags, examples, name } from '../flags.js';
import { printError, printText } from '../output.js';

/** The `unschedule` command. Exits 1 when there was no such schedule. */
export function unscheduleCommand(): Command {
  const command = new Command('unschedule')
    .summary('remove a recurring (cron) job')
    .description(
      'Removes the schedule NAME; jobs it already enqueued stay. Exits 1 when there is no such schedule.',
    )
    .argument('<NAME>', 'the schedule name', name);
  addConnectionFlags(command);
  return command
    .addHelpText('after', examples('skiplock unschedule nightly-report'))
    .action(async (name: string, flags: ConnectionFlags) => {
      await withDatabase(flags, async ({ skiplock }) => {
        if (await skiplock.unschedule(name)) printText(`removed schedule ${name}`);
        else {
          printError(`no schedule named ${JSON.stringify(name)}`);
          process.exitCode = 1;
        }
      });
    });
}
