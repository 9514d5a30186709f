/**
 * `skiplock requeue [ID...]`: puts dead/failed (and cancelled) jobs back to `queued`.
 */
import { Command } from 'commander';
import { REQUEUABLE_STATUSES } from '../../db/queries/requeue.js';
import { parseRequeueFilter } from '../../operations/operations.js';
import type { RequeueFilter, Skiplock } from '../../skiplock.js';
import { withDatabase } from '../database.js';
import {
  addDatabaseCommandFlags,
  addJobSelectionFlags,
  type JobSelectionFlags,
  jobSelection,
} from '../flags.js';
import { printJson, printText } from '../output.js';
import { UsageError } from '../usage-error.js';

interface RequeueFlags extends JobSelectionFlags<'dead' | 'failed' | 'cancelled'> {
  all?: boolean;
  json?: boolean;
}

/** The `requeue` command. */
export function requeueCommand(): Command {
  const command = addJobSelectionFlags(
    new Command('requeue')
      .summary('put dead/failed jobs back to queued')
      .description(
        'Puts dead and failed jobs back to queued with attempts 0, run_at now and last_error cleared; cancelled jobs too when named by id or --status cancelled. Give job ids and/or filters; --all requeues every dead and failed job.',
      ),
    'only dead, failed or cancelled jobs',
    REQUEUABLE_STATUSES,
  ).option('--all', 'every dead and failed job, when no id or filter is given');
  return addDatabaseCommandFlags(command, [
    'skiplock requeue 42 43',
    'skiplock requeue --status dead --kind send_invoice_email',
    'skiplock requeue --tag tenant:7',
    'skiplock requeue --all --json',
    'skiplock requeue --ids-from dead-ids.txt',
  ]).action(async (args: string[], flags: RequeueFlags) => {
    const filter: RequeueFilter = await jobSelection(args, flags);
    if (Object.keys(filter).length === 0 && !flags.all) {
      throw new UsageError(
        'give job ids, --status, --kind, --queue or --tag, or --all to requeue every dead and failed job',
      );
    }
    if (Object.keys(filter).length > 0 && flags.all) {
      throw new UsageError('--all cannot be combined with job ids, --status, --kind, --queue or --tag');
    }
    const selection: RequeueFilter = Object.keys(filter).length === 0 ? { all: true } : filter;
    // Bad input is refused before connecting (or starting the embedded server).
    parseRequeueFilter(selection);
    await withDatabase(flags, async ({ skiplock }) => {
      const requeued = await skiplock.requeue(selection);
      const reasons = requeued === 0 ? await whyNothingMatched(skiplock, filter) : [];
      if (flags.json) printJson(reasons.length > 0 ? { requeued, reasons } : { requeued });
      else printText([`requeued ${requeued} job${requeued === 1 ? '' : 's'}`, ...reasons].join('\n'));
    });
  });
}

/** Most job ids looked up to explain an empty requeue. */
const MAX_EXPLAINED_IDS = 20;

/**
 * Why a requeue matched nothing, in words: each given id's status (only dead
 * and failed jobs can be requeued), or that no dead or failed job matches the filters.
 */
async function whyNothingMatched(skiplock: Skiplock, filter: RequeueFilter): Promise<string[]> {
  if (filter.ids === undefined) {
    // The statuses given name the jobs; without them, dead and failed ones.
    const statuses = filter.status ? [...new Set([filter.status].flat())].join(' or ') : 'dead or failed';
    const what = [
      filter.kind && `kind ${[filter.kind].flat().join(', ')}`,
      filter.queue && `queue ${[filter.queue].flat().join(', ')}`,
      filter.tags && `tags ${[filter.tags].flat().join(', ')}`,
    ].filter(Boolean);
    return [`no ${statuses} job${what.length > 0 ? ` with ${what.join(' and ')}` : ''}`];
  }
  const reasons: string[] = [];
  for (const id of filter.ids.slice(0, MAX_EXPLAINED_IDS)) {
    const job = await skiplock.getJob(id);
    if (!job)
      reasons.push(`job ${id}: not in the jobs table (deleted on success, archived, or never existed)`);
    else if (job.status !== 'dead' && job.status !== 'failed' && job.status !== 'cancelled')
      reasons.push(`job ${id}: is ${job.status}; only dead, failed and cancelled jobs can be requeued`);
    else reasons.push(`job ${id}: is ${job.status} but does not match --status, --kind, --queue or --tag`);
  }
  return reasons;
}
