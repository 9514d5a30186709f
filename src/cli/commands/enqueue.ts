/**
 * `skiplock enqueue KIND [PAYLOAD_JSON]`: inserts one job.
 */
import { Command } from 'commander';
import { MAX_DELAY_MS } from '../../job/defaults.js';
import { definedOnly } from '../../options.js';
import type { JobOptions } from '../../skiplock.js';
import { withDatabase } from '../database.js';
import {
  addDatabaseCommandFlags,
  type ConnectionFlags,
  collect,
  integer,
  name,
  parsePayloadArgument,
} from '../flags.js';
import { printJson, printText } from '../output.js';

interface EnqueueFlags extends ConnectionFlags {
  queue?: string;
  priority?: number;
  delayMs?: number;
  maxAttempts?: number;
  tag?: string[];
  startWithinMs?: number;
  groupKey?: string;
  json?: boolean;
}

/** The `enqueue` command. */
export function enqueueCommand(): Command {
  const command = new Command('enqueue')
    .summary('enqueue one job')
    .description('Enqueues one job of KIND with PAYLOAD_JSON (a JSON value, default {}).')
    .argument('<KIND>', 'the job kind, routes it to a handler', name)
    .argument('[PAYLOAD_JSON]', 'the payload as JSON', '{}')
    .option('--queue <name>', 'queue name', name, 'default')
    .option('--priority <n>', 'larger runs first (32-bit integer)', integer(-2_147_483_648, 2_147_483_647))
    // The library's bounds (10,000 years), not the 32-bit ones of loop intervals.
    .option(
      '--delay-ms <ms>',
      'run no earlier than this many milliseconds from now',
      integer(0, MAX_DELAY_MS),
    )
    .option('--max-attempts <n>', 'attempts before the dead letter (default 20)', integer(1, 2_147_483_647))
    .option('--tag <tag>', 'a tag for the job (repeatable; at most 20, each 1-100 characters)', collect)
    .option(
      '--start-within-ms <ms>',
      'never run the job unless it starts within this many milliseconds from now (it ends cancelled, expired); more than --delay-ms',
      integer(1, MAX_DELAY_MS),
    )
    .option('--group-key <key>', "the key a queue's group limits count the job under (1-200 characters)");
  return addDatabaseCommandFlags(command, [
    `skiplock enqueue send_invoice_email '{"orderId": 42}'`,
    `skiplock enqueue resize_image '{"url": "s3://img/1.png"}' --queue media --priority 5 --delay-ms 60000`,
    'skiplock enqueue nightly_report --max-attempts 3 --json',
    `skiplock enqueue sync_ledger '{"account": 42}' --queue ledger --group-key account-42`,
    `skiplock enqueue sync_account '{"accountId": 7}' --tag tenant:7 --tag import --start-within-ms 300000`,
  ]).action(async (kind: string, payloadJson: string, flags: EnqueueFlags) => {
    const payload = parsePayloadArgument(payloadJson);
    const options: JobOptions = definedOnly({
      queue: flags.queue,
      priority: flags.priority,
      delayMs: flags.delayMs,
      maxAttempts: flags.maxAttempts,
      tags: flags.tag,
      startWithinMs: flags.startWithinMs,
      groupKey: flags.groupKey,
    });
    await withDatabase(flags, async ({ skiplock }) => {
      const job = await skiplock.enqueue(kind, payload, options);
      if (flags.json) printJson(job);
      else
        printText(
          `enqueued job ${job.id} (kind ${job.kind}, queue ${job.queue}, priority ${job.priority}, run_at ${job.runAt.toISOString()})`,
        );
    });
  });
}
