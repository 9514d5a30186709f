#!/usr/bin/env node
/**
 * The `skiplock` command line (SPEC §8). Exit codes: 0 ok, 1 failure, 2 usage
 * (a bad flag or argument; the message names it).
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { ValidationError } from '../errors.js';
import { demoCommand } from './commands/demo.js';
import { devCommand } from './commands/dev.js';
import { enqueueCommand } from './commands/enqueue.js';
import { jobsCommand } from './commands/jobs.js';
import { migrateCommand } from './commands/migrate.js';
import { requeueCommand } from './commands/requeue.js';
import { scheduleCommand } from './commands/schedule.js';
import { schedulesCommand } from './commands/schedules.js';
import { statsCommand } from './commands/stats.js';
import { unscheduleCommand } from './commands/unschedule.js';
import { workerCommand } from './commands/worker.js';
import { UsageError } from './usage-error.js';

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

Exit codes: 0 ok, 1 failure, 2 usage error.

Examples:
  $ skiplock demo
  $ skiplock migrate
  $ skiplock enqueue send_invoice_email '{"orderId": 42}'
  $ skiplock worker --handlers ./handlers.js --concurrency 20
  $ skiplock stats`,
  );
for (const command of [
  migrateCommand(),
  workerCommand(),
  enqueueCommand(),
  statsCommand(),
  jobsCommand(),
  requeueCommand(),
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
  command.exitOverride().showHelpAfterError('(add --help for usage)');
  command.commands.forEach(configure);
};
configure(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  process.exitCode = report(error);
}

/** Prints an error for people and returns the exit code. */
function report(error: unknown): number {
  if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2; // commander printed it
  if (error instanceof UsageError) {
    process.stderr.write(`skiplock: ${error.message}\n`);
    return 2;
  }
  if (error instanceof ValidationError) {
    process.stderr.write(`skiplock: invalid ${flagOf(error.field)}: ${error.reason}\n`);
    return 2;
  }
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`skiplock: ${message}\n`);
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause instanceof Error && cause.message !== message)
    process.stderr.write(`  cause: ${cause.message}\n`);
  if (process.env.SKIPLOCK_DEBUG && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  return 1;
}

/** The flag or argument a library field came from: `worker.heartbeatIntervalMs` → `--heartbeat-interval-ms`. */
function flagOf(field: string): string {
  if (field === 'kind' || field === 'cron' || field === 'name') return field.toUpperCase();
  if (/^payload($|[.[])/.test(field)) return `PAYLOAD_JSON${field.slice('payload'.length)}`;
  const name = field.replace(/^(worker|options)\./, '').replace(/^queues\[\d+\]$/, 'queue');
  if (/^[a-z][a-zA-Z]*$/.test(name)) return `--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  return field;
}
