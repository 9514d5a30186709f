/**
 * `skiplock requeue [ID...]`: puts dead/failed jobs back to `queued`.
 */
import { Command } from 'commander';
import type { RequeueFilter } from '../../skiplock.js';
import { withDatabase } from '../database.js';
import {
  addConnectionFlags,
  addJsonFlag,
  type ConnectionFlags,
  collect,
  examples,
  repeatableChoice,
} from '../flags.js';
import { printJson, printText } from '../output.js';
import { UsageError } from '../usage-error.js';

interface RequeueFlags extends ConnectionFlags {
  status?: ('dead' | 'failed')[];
  kind?: string[];
  queue?: string[];
  all?: boolean;
  json?: boolean;
}

/** The `requeue` command. */
export function requeueCommand(): Command {
  const command = new Command('requeue')
    .summary('put dead/failed jobs back to queued')
    .description(
      'Puts dead and failed jobs back to queued with attempts 0, run_at now and last_error cleared. Give job ids and/or filters; --all requeues every dead and failed job.',
    )
    .argument('[ID...]', 'job ids')
    .addOption(repeatableChoice('--status <status>', 'only dead or only failed jobs', ['dead', 'failed']))
    .option('--kind <kind>', 'only this kind (repeatable)', collect)
    .option('--queue <name>', 'only this queue (repeatable)', collect)
    .option('--all', 'every dead and failed job, when no id or filter is given');
  addConnectionFlags(command);
  addJsonFlag(command);
  return command
    .addHelpText(
      'after',
      examples(
        'skiplock requeue 42 43',
        'skiplock requeue --status dead --kind send_invoice_email',
        'skiplock requeue --all --json',
      ),
    )
    .action(async (ids: string[], flags: RequeueFlags) => {
      const filter: RequeueFilter = {};
      const bad = ids.find((id) => !/^[1-9][0-9]{0,18}$/.test(id));
      if (bad !== undefined) throw new UsageError(`ID must be a job id (a positive integer), got ${bad}`);
      if (ids.length > 0) filter.ids = ids;
      if (flags.status) filter.status = flags.status;
      if (flags.kind) filter.kind = flags.kind;
      if (flags.queue) filter.queue = flags.queue;
      if (Object.keys(filter).length === 0 && !flags.all) {
        throw new UsageError(
          'give job ids, --status, --kind or --queue, or --all to requeue every dead and failed job',
        );
      }
      await withDatabase(flags, async ({ skiplock }) => {
        const requeued = await skiplock.requeue(Object.keys(filter).length === 0 ? { all: true } : filter);
        if (flags.json) printJson({ requeued });
        else printText(`requeued ${requeued} job${requeued === 1 ? '' : 's'}`);
      });
    });
}
