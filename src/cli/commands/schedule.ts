/**
 * `skiplock schedule NAME CRON KIND [PAYLOAD_JSON]`: creates or updates a
 * schedule that enqueues one job of KIND per slot of CRON.
 */
import { Command } from 'commander';
import { definedOnly } from '../../options.js';
import type { ScheduleOptions } from '../../schedule/schedule-options.js';
import { withDatabase } from '../database.js';
import {
  addDatabaseCommandFlags,
  type ConnectionFlags,
  choice,
  integer,
  name,
  parsePayloadArgument,
} from '../flags.js';
import { printJson, printText } from '../output.js';

interface ScheduleFlags extends ConnectionFlags {
  timezone?: string;
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  overlap?: 'skip' | 'allow';
  catchUp?: 'latest' | 'all' | 'none';
  catchUpMs?: number;
  json?: boolean;
}

/** The `schedule` command. */
export function scheduleCommand(): Command {
  const command = new Command('schedule')
    .summary('create or update a recurring (cron) job')
    .description(
      'Creates or updates the schedule NAME: workers enqueue one job of KIND with PAYLOAD_JSON (default {}) per slot of CRON (5 or 6 fields, or @hourly, @daily…), read in --timezone.',
    )
    .argument('<NAME>', 'the schedule name (updates the schedule of that name if there is one)', name)
    .argument('<CRON>', "the cron expression, quoted: '30 2 * * *'")
    .argument('<KIND>', 'the kind of the jobs', name)
    .argument('[PAYLOAD_JSON]', 'the payload of each job, as JSON', '{}')
    .option('--timezone <zone>', 'IANA time zone the expression is read in (default UTC)')
    .option('--queue <name>', 'queue of the jobs (default default)', name)
    .option('--priority <n>', 'larger runs first (32-bit integer)', integer(-2_147_483_648, 2_147_483_647))
    .option('--max-attempts <n>', 'attempts before the dead letter (default 20)', integer(1, 2_147_483_647))
    .addOption(
      choice('--overlap <mode>', 'skip: no job while the previous one is queued or running (default skip)', [
        'skip',
        'allow',
      ]),
    )
    .addOption(
      choice('--catch-up <mode>', 'slots missed while no worker ran (default latest)', [
        'latest',
        'all',
        'none',
      ]),
    )
    .option(
      '--catch-up-ms <ms>',
      'how far back --catch-up all goes (default one day)',
      integer(0, 315_360_000_000),
    );
  return addDatabaseCommandFlags(command, [
    `skiplock schedule nightly-report '30 2 * * *' send_report '{"to": "ops"}' --timezone Europe/Berlin`,
    "skiplock schedule heartbeat '*/10 * * * * *' ping --overlap allow",
  ]).action(async (name: string, cron: string, kind: string, payloadJson: string, flags: ScheduleFlags) => {
    const payload = parsePayloadArgument(payloadJson);
    // The schedule's flags are named as its options.
    const { databaseUrl, schema, allowSharedSchema, json, ...given } = flags;
    const options: ScheduleOptions = definedOnly(given);
    await withDatabase(flags, async ({ skiplock }) => {
      const info = await skiplock.schedule(name, cron, kind, payload, options);
      if (flags.json) printJson(info);
      else
        printText(
          `schedule ${info.name}: ${info.cron} (${info.timezone}) → ${info.kind} on queue ${info.queue}, next run ${info.nextRunAt.toISOString()}`,
        );
    });
  });
}
