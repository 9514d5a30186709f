/**
 * `skiplock cancel [ID...]`: ends waiting and queued jobs `cancelled` at once and asks the
 * workers running the others to abort them.
 */
import { Command } from 'commander';
import { CANCELLABLE_STATUSES, type CancellableStatus } from '../../db/queries/cancel.js';
import { type CancelFilter, parseCancelFilter } from '../../operations/cancel.js';
import { withDatabase } from '../database.js';
import {
  addDatabaseCommandFlags,
  addJobSelectionFlags,
  type JobSelectionFlags,
  jobSelection,
} from '../flags.js';
import { printJson, printText } from '../output.js';

interface CancelFlags extends JobSelectionFlags<CancellableStatus> {
  json?: boolean;
}

/** The `cancel` command. */
export function cancelCommand(): Command {
  const command = addJobSelectionFlags(
    new Command('cancel')
      .summary('cancel queued and running jobs')
      .description(
        "Ends waiting and queued jobs as cancelled at once (a waiting job's children that said cancel with it); for running jobs, the worker holding each aborts its handler within about a second and the job ends cancelled, never retried. Finished jobs are left alone. Give job ids and/or filters.",
      ),
    'only waiting, queued or running jobs',
    CANCELLABLE_STATUSES,
  );
  return addDatabaseCommandFlags(command, [
    'skiplock cancel 42 43',
    'skiplock cancel --kind send_invoice_email --status queued --json',
    'skiplock cancel --tag tenant:7 --tag import',
    "psql -At -c \"SELECT id FROM skiplock.jobs WHERE payload->>'tenant' = '7'\" | skiplock cancel --ids-from -",
  ]).action(async (args: string[], flags: CancelFlags) => {
    const filter: CancelFilter = await jobSelection(
      args,
      flags,
      'give job ids, --status, --kind, --queue or --tag (cancel never means every job)',
    );
    // Bad input is refused before connecting (or starting the embedded server).
    parseCancelFilter(filter);
    await withDatabase(flags, async ({ skiplock }) => {
      const counts = await skiplock.cancel(filter);
      if (flags.json) printJson(counts);
      else if (counts.cancelled + counts.running === 0)
        printText('no waiting, queued or running job matched');
      else
        printText(
          `cancelled ${counts.cancelled} waiting or queued job${counts.cancelled === 1 ? '' : 's'}; asked the workers of ${counts.running} running job${counts.running === 1 ? '' : 's'} to stop them`,
        );
    });
  });
}
