/**
 * `skiplock jobs [list]` and `skiplock jobs show ID`: inspect jobs.
 */
import { Command, InvalidArgumentError } from 'commander';
import { JOB_STATUSES, type JobRecord, type JobStatus } from '../../job/job.js';
import type { ListJobsFilter } from '../../skiplock.js';
import { withDatabase } from '../database.js';
import {
  addDatabaseCommandFlags,
  addJsonFlag,
  type ConnectionFlags,
  type DatabaseCommandFlags,
  examples,
  integer,
  type JobFilterFlags,
  jobFilter,
  jobFilterOption,
  repeatableChoice,
} from '../flags.js';
import { printError, printJson, printText } from '../output.js';
import { renderTable } from '../table.js';
import { UsageError } from '../usage-error.js';

interface ListFlags extends ConnectionFlags, JobFilterFlags<JobStatus> {
  limit: number;
  oldestFirst?: boolean;
  after?: string;
  payloadChars: number;
  json?: boolean;
}

/** The `jobs` command and its `list` (default) and `show` subcommands. */
export function jobsCommand(): Command {
  const list = new Command('list')
    .summary('list jobs (the default)')
    .description(
      'Lists jobs, newest first (--oldest-first for the other way); --after ID continues after the last id of a page. Filters of one kind are OR-ed (but --tag: a job must have every tag given); filters of different kinds AND-ed.',
    )
    .addOption(jobFilterOption('queue'))
    .addOption(jobFilterOption('kind'))
    .addOption(repeatableChoice('--status <status>', 'only this status', JOB_STATUSES))
    .addOption(jobFilterOption('tag'))
    .option('--limit <n>', 'most jobs shown', integer(1, 100_000), 100)
    .option('--oldest-first', 'oldest id first instead of newest')
    .option('--after <id>', 'continue after this job id (the last id of the previous page)', jobId)
    .option(
      '--payload-chars <n>',
      'characters of each payload read (payload_preview; `jobs show ID` prints a whole payload)',
      integer(1, 100_000),
      200,
    );
  addDatabaseCommandFlags(list, [
    'skiplock jobs',
    'skiplock jobs list --status dead --kind send_invoice_email',
    'skiplock jobs --queue media --status queued --status running --json',
    'skiplock jobs --tag tenant:7 --tag import',
  ]).action(async (ownFlags: ListFlags) => {
    const flags = withJobsFlags(list, ownFlags);
    // A list never reads whole payloads: they may be large, and the table does not show them.
    const filter: ListJobsFilter & { payloadPreviewChars: number } = {
      ...jobFilter(flags),
      limit: flags.limit,
      order: flags.oldestFirst ? 'oldest' : 'newest',
      payloadPreviewChars: flags.payloadChars,
    };
    if (flags.after) filter.after = flags.after;
    await withDatabase(flags, async ({ skiplock }) => {
      const jobs = await skiplock.listJobs(filter);
      if (flags.json) printJson(jobs);
      else if (jobs.length === 0) printText('no jobs');
      else
        printText(
          renderTable(
            ['id', 'queue', 'kind', 'status', 'priority', 'attempts', 'run_at', 'tags', 'last_error'],
            jobs.map((j) => [
              j.id,
              j.queue,
              j.kind,
              j.status,
              j.priority,
              `${j.attempts}/${j.maxAttempts}`,
              j.runAt.toISOString(),
              j.tags.join(', '),
              firstLine(j.lastError),
            ]),
          ),
        );
    });
  });

  const show = new Command('show')
    .summary('show one job')
    .description(
      'Shows one job with its payload, last error, result, progress and log lines. Exit code 1 when it is not in the jobs table.',
    )
    .argument('<ID>', 'the job id');
  addDatabaseCommandFlags(show, ['skiplock jobs show 42', 'skiplock jobs show 42 --json']).action(
    async (id: string, ownFlags: DatabaseCommandFlags) => {
      const flags = withJobsFlags(show, ownFlags);
      if (!/^[1-9][0-9]{0,18}$/.test(id))
        throw new UsageError(`ID must be a job id (a positive integer), got ${id}`);
      await withDatabase(flags, async ({ skiplock }) => {
        const job = await skiplock.getJob(id);
        if (!job) {
          printError(`no job ${id} in the jobs table (deleted on success, archived, or never enqueued)`);
          process.exitCode = 1;
          return;
        }
        if (flags.json) printJson(job);
        else printText(describeJob(job));
      });
    },
  );

  const command = new Command('jobs')
    .summary('list and inspect jobs')
    .description('Lists jobs (`jobs list`, the default) or shows one (`jobs show ID`).')
    .addCommand(list, { isDefault: true })
    .addCommand(show)
    .addHelpText('after', examples('skiplock jobs --status dead', 'skiplock jobs show 42'));
  // Commander hands the flags `jobs` has to it wherever they stand, before or after the
  // subcommand (`jobs --json show 42`, `jobs show 42 --json`): so `jobs` has --json too, without
  // a default and hidden from its help (each subcommand's help lists it). The connection flags
  // are the program's wherever they stand, handed to the subcommand (acceptConnectionFlagsFirst).
  for (const option of addJsonFlag(new Command()).options)
    command.addOption(option.default(undefined).hideHelp());
  return command;
}

/** A subcommand's flags: its own, and over them --json given to `jobs`. */
function withJobsFlags<F extends DatabaseCommandFlags>(subcommand: Command, flags: F): F {
  return { ...flags, ...subcommand.parent?.opts<Pick<DatabaseCommandFlags, 'json'>>() };
}

function firstLine(text: string | null): string | null {
  if (text === null) return null;
  const line = text.split('\n', 1)[0]!;
  return line.length > 60 ? `${line.slice(0, 59)}…` : line;
}

function describeJob(job: JobRecord): string {
  const time = (d: Date | null) => (d === null ? '-' : d.toISOString());
  return [
    `id            ${job.id}`,
    `kind          ${job.kind}`,
    `queue         ${job.queue}`,
    `status        ${job.status}`,
    `priority      ${job.priority}`,
    `attempts      ${job.attempts} of ${job.maxAttempts}`,
    `run_at        ${time(job.runAt)}`,
    `created_at    ${time(job.createdAt)}`,
    `locked_at     ${time(job.lockedAt)}`,
    `locked_by     ${job.lockedBy ?? '-'}`,
    `finished_at   ${time(job.finishedAt)}`,
    `start_by      ${time(job.startBy)}`,
    `tags          ${job.tags.length === 0 ? '-' : job.tags.join(', ')}`,
    `group_key     ${job.groupKey ?? '-'}`,
    `payload       ${JSON.stringify(job.payload)}`,
    `last_error    ${job.lastError ?? '-'}`,
    `errors        ${job.errors.length === 0 ? '-' : `${job.errors.length} failed attempts, oldest first`}`,
    ...job.errors.map(
      (e) => `  #${e.attempt}  ${time(e.at)}  ${e.workerId ?? '-'}  ${firstLine(e.error) ?? ''}`,
    ),
    `result        ${job.result == null ? '-' : JSON.stringify(job.result)}`,
    `progress      ${job.progress == null ? '-' : JSON.stringify(job.progress)}`,
    `logs          ${!job.logs?.length ? '-' : `${job.logs.length} lines, oldest first`}`,
    ...(job.logs ?? []).map((l) => `  ${time(l.at)}  ${l.line}`),
    // Dependencies: printed only for a job that has some.
    ...links('depends_on', job.dependsOn),
    ...links('children', job.children),
  ].join('\n');
}

/** A job's parents or children, one line each: id, kind, status. */
function links(label: string, jobs: JobRecord['dependsOn']): string[] {
  if (!jobs || jobs.length === 0) return [];
  return [
    `${label.padEnd(14)}${jobs.length}`,
    ...jobs.map((j) => `  ${j.id}  ${j.kind}  ${j.status ?? '-'}`),
  ];
}

/** Parser of a job id flag. @throws {InvalidArgumentError} (exit 2) for anything but a positive integer. */
function jobId(value: string): string {
  if (!/^[1-9][0-9]{0,18}$/.test(value))
    throw new InvalidArgumentError('must be a job id (a positive integer).');
  return value;
}
