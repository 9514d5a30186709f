#!/usr/bin/env node
/**
 * The `skiplock` command line. Exit codes: 0 ok, 1 failure, 2 usage (a bad flag
 * or argument; the message names it). Errors are one line on stderr, prefixed
 * `skiplock: error:`.
 */
import { readFileSync } from 'node:fs';
import { Command, Help } from 'commander';
import { cancelCommand } from './commands/cancel.js';
import { dashboardCommand } from './commands/dashboard.js';
import { demoCommand } from './commands/demo.js';
import { devCommand } from './commands/dev.js';
import { enqueueCommand } from './commands/enqueue.js';
import { jobsCommand } from './commands/jobs.js';
import { migrateCommand } from './commands/migrate.js';
import { pruneCommand } from './commands/prune.js';
import { queuesCommand } from './commands/queues.js';
import { relayCommand } from './commands/relay.js';
import { requeueCommand } from './commands/requeue.js';
import { scheduleCommand } from './commands/schedule.js';
import { schedulesCommand } from './commands/schedules.js';
import { statsCommand } from './commands/stats.js';
import { unscheduleCommand } from './commands/unschedule.js';
import { workerCommand } from './commands/worker.js';
import { commanderOutputError, reportError, USAGE_HINT } from './error-report.js';
import { acceptConnectionFlagsFirst } from './flags.js';

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const program = new Command('skiplock')
  .description('A job queue for Node.js that lives in PostgreSQL.')
  .version(version)
  .addHelpText(
    'after',
    `
Connection: --database-url, else $DATABASE_URL, else an embedded PostgreSQL with
its data under ./.skiplock (shared by the skiplock processes of this folder).
The connection flags (--database-url, --schema, --allow-shared-schema) go after
the command or before it: skiplock --schema app_jobs migrate.

Exit codes: 0 ok, 1 failure, 2 usage error.

Examples:
  $ skiplock demo
  $ skiplock migrate
  $ skiplock enqueue send_invoice_email '{"orderId": 42}'
  $ skiplock worker --handlers ./handlers.js --concurrency 20
  $ skiplock stats
  $ skiplock dashboard`,
  );
acceptConnectionFlagsFirst(program);
program.configureHelp({
  // A command whose only options are hidden (`jobs`, which takes its subcommands' --json before
  // them too) is listed without `[options]`.
  subcommandTerm(command) {
    const term = Help.prototype.subcommandTerm.call(this, command);
    return command.options.some((option) => !option.hidden) ? term : term.replace(' [options]', '');
  },
});
for (const command of [
  migrateCommand(),
  workerCommand(),
  relayCommand(),
  enqueueCommand(),
  statsCommand(),
  jobsCommand(),
  requeueCommand(),
  cancelCommand(),
  queuesCommand(),
  pruneCommand(),
  dashboardCommand(),
  schedulesCommand(),
  scheduleCommand(),
  unscheduleCommand(),
  demoCommand(),
  devCommand(),
]) {
  program.addCommand(command);
}
// Every command, nested ones included, reports usage errors by throwing instead of exiting.
const configure = (command: Command): void => {
  command
    .exitOverride()
    .configureOutput({ outputError: commanderOutputError })
    .showHelpAfterError(USAGE_HINT);
  command.commands.forEach(configure);
};
configure(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  process.exitCode = reportError(error);
}
