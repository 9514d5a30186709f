/**
 * Flags shared by several commands, and the parsers that turn flag text into
 * checked values. A parser's error names the flag (commander prefixes it), and
 * ends the process with exit code 2.
 */
import { readFile } from 'node:fs/promises';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { ValidationError } from '../errors.js';
import { isJobId, MAX_JOB_ID } from '../job/defaults.js';
import { assertName } from '../job/job.js';
import { LOG_LEVELS, type LogLevel } from './logger.js';
import { UsageError } from './usage-error.js';

/** Connection flags as parsed. */
export interface ConnectionFlags {
  /** `--database-url`; unset means `DATABASE_URL`, then the embedded server. */
  databaseUrl?: string;
  /** `--schema`: the schema of the jobs table. */
  schema: string;
  /** `--allow-shared-schema`: lets `--schema` be `public` or `information_schema` (see docs/security.md). */
  allowSharedSchema?: boolean;
}

/** Adds `--database-url URL`, `--schema NAME` (default `skiplock`) and `--allow-shared-schema`. */
export function addConnectionFlags(command: Command): Command {
  return command
    .option(
      '--database-url <url>',
      'PostgreSQL URL (default: $DATABASE_URL, else the embedded server under ./.skiplock)',
    )
    .option('--schema <name>', 'schema of the jobs table', 'skiplock')
    .option(
      '--allow-shared-schema',
      'let --schema be public or information_schema (risky: any role that can create objects there can plant code your roles run)',
    );
}

/**
 * Lets the connection flags come before the command too (`skiplock --schema
 * app_jobs migrate`): `program` takes them wherever they stand (hidden from
 * its help, without defaults), and hands each one given to the command that
 * runs, or the nearest parent of it that has the flag (such as `queues` for
 * `queues pause`). Given twice, the later one wins, as any repeated flag.
 *
 * @throws {UsageError} (exit 2), before the command runs, when a flag is given
 *   to a command that does not take it.
 */
export function acceptConnectionFlagsFirst(program: Command): void {
  const given = addConnectionFlags(program.createCommand()).options;
  for (const option of given) program.addOption(option.default(undefined).hideHelp());
  program.hook('preAction', (_program, action) => {
    for (const option of given) {
      const key = option.attributeName();
      if (program.getOptionValueSource(key) !== 'cli') continue;
      let target: Command | null = action;
      while (target && target !== program && !target.options.some((o) => o.attributeName() === key))
        target = target.parent;
      if (!target || target === program)
        throw new UsageError(`${option.long} does not apply to skiplock ${action.name()}`);
      target.setOptionValueWithSource(key, program.getOptionValue(key), 'cli');
    }
  });
}

/** Flags of a command that runs until stopped (`worker`, `relay`), as parsed. */
export interface ServiceFlags extends ConnectionFlags {
  /** `--log-level`: the least level logged. */
  logLevel: LogLevel;
  /** `--metrics-port`: serve Prometheus metrics on this port; unset serves none. */
  metricsPort?: number;
  /** `--metrics-host`: the metrics server's address. */
  metricsHost: string;
}

/**
 * Adds what every command that runs until stopped has: `--metrics-port N`,
 * `--metrics-host ADDRESS` (default `127.0.0.1`), `--log-level LEVEL`
 * (default `info`) and the connection flags.
 */
export function addServiceFlags(command: Command): Command {
  command
    .option(
      '--metrics-port <n>',
      'serve Prometheus metrics at /metrics on this port (needs prom-client)',
      integer(0, 65_535),
    )
    .option('--metrics-host <address>', 'address of the metrics server', '127.0.0.1')
    .addOption(choice('--log-level <level>', 'log level', LOG_LEVELS).default('info'));
  return addConnectionFlags(command);
}

/** Adds `--json`: machine-readable output on stdout. */
export function addJsonFlag(command: Command): Command {
  return command.option('--json', 'print JSON instead of a table');
}

/** The flags {@link addDatabaseCommandFlags} adds, as parsed. */
export interface DatabaseCommandFlags extends ConnectionFlags {
  /** `--json`: print JSON instead of a table. */
  json?: boolean;
}

/**
 * Adds what every command that reads or changes the jobs table and prints a
 * result has: the connection flags, `--json`, and `exampleLines` as the
 * examples shown after its help.
 */
export function addDatabaseCommandFlags(command: Command, exampleLines: readonly string[]): Command {
  addConnectionFlags(command);
  addJsonFlag(command);
  return command.addHelpText('after', examples(...exampleLines));
}

/**
 * A parser for an integer flag within [min, max].
 *
 * @throws {InvalidArgumentError} (exit 2) for anything else, such as `1.5`, `abc` or `1e3`.
 */
export function integer(min: number, max: number): (value: string) => number {
  return (value) => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError('must be an integer.');
    const n = Number(value);
    if (n < min || n > max) throw new InvalidArgumentError(`must be between ${min} and ${max}.`);
    return n;
  };
}

/** Parser for a duration in milliseconds: an integer ≥ `min`, at most about 24.8 days. */
export function milliseconds(min = 0): (value: string) => number {
  return integer(min, 2_147_483_647);
}

/**
 * Parser for a name (a kind, a queue, a schedule), checked as the library
 * checks it (1 to 1,024 bytes of UTF-8, storable), so a bad one is refused before
 * connecting.
 *
 * @throws {InvalidArgumentError} (exit 2) saying what is wrong.
 */
export function name(value: string): string {
  try {
    assertName(value, 'name');
  } catch (error) {
    if (error instanceof ValidationError) throw new InvalidArgumentError(`${error.reason}.`);
    throw error;
  }
  return value;
}

/** Collects a repeatable flag (`--queue a --queue b`) into an array. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * A repeatable option whose every value must be one of `choices`
 * (`--status dead --status failed`); a bad value is a usage error naming the flag.
 */
export function repeatableChoice(flags: string, description: string, choices: readonly string[]): Option {
  const option = new Option(flags, `${description} (repeatable)`).choices(choices);
  return option.argParser((value: string, previous: string[] | undefined) => {
    if (!choices.includes(value)) {
      throw new InvalidArgumentError(`Allowed choices are ${choices.join(', ')}.`);
    }
    return collect(value, previous);
  });
}

/** An option whose value must be one of `choices` (commander reports the flag and the choices). */
export function choice(flags: string, description: string, choices: readonly string[]): Option {
  return new Option(flags, description).choices(choices);
}

/** Help text listing examples, shown after a command's options. */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`;
}

/**
 * The PAYLOAD_JSON argument as a value.
 *
 * @throws {UsageError} (exit 2) when it is not valid JSON.
 */
export function parsePayloadArgument(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`PAYLOAD_JSON is not valid JSON: ${(error as Error).message}`);
  }
}

/** Most job ids `--ids-from` reads (about 20 MB of ids). */
const MAX_IDS_FROM = 1_000_000;

/**
 * The job ids of `--ids-from FILE` (`-` for standard input): decimal ids
 * separated by whitespace or commas, such as one per line from
 * `psql -At -c 'SELECT id …'` or `skiplock jobs --json | jq -r '.[].id'`.
 *
 * @throws {UsageError} (exit 2) naming `--ids-from` when the file cannot be
 *   read, holds something that is not a job id, or more than a million ids.
 */
export async function readIdsFrom(source: string): Promise<string[]> {
  let text: string;
  try {
    text = source === '-' ? await readStream(process.stdin) : await readFile(source, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : 'not readable';
    throw new UsageError(`--ids-from ${source}: ${reason}`, { cause: error });
  }
  const ids = text.split(/[\s,]+/).filter((id) => id !== '');
  const bad = ids.find((id) => !/^[1-9][0-9]{0,18}$/.test(id));
  if (bad !== undefined)
    throw new UsageError(`--ids-from ${source}: not a job id (a positive integer): ${bad.slice(0, 40)}`);
  if (ids.length > MAX_IDS_FROM)
    throw new UsageError(`--ids-from ${source}: more than ${MAX_IDS_FROM} ids; split the file`);
  return ids;
}

async function readStream(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks).toString('utf8');
}

/** The job filter flags as parsed (`jobs list`, `cancel`, `requeue`); `S` is the statuses `--status` takes. */
export interface JobFilterFlags<S extends string> {
  status?: S[];
  kind?: string[];
  queue?: string[];
  tag?: string[];
}

/** The flags of a command that selects jobs by id and filter (`cancel`, `requeue`), as parsed. */
export interface JobSelectionFlags<S extends string> extends ConnectionFlags, JobFilterFlags<S> {
  idsFrom?: string;
}

/** The repeatable job filter flags other than `--status`, whose choices are each command's own. */
const JOB_FILTER_FLAGS = {
  kind: ['--kind <kind>', 'only this kind (repeatable)'],
  queue: ['--queue <name>', 'only this queue (repeatable)'],
  tag: ['--tag <tag>', 'only jobs having this tag (repeatable: jobs having every tag given)'],
} as const;

/**
 * The option of a repeatable job filter flag: `--kind`, `--queue` or `--tag`
 * (a job must have every tag given), read as in {@link jobFilter}. Each
 * command adds them in the order its help lists them.
 */
export function jobFilterOption(flag: keyof typeof JOB_FILTER_FLAGS): Option {
  const [flags, description] = JOB_FILTER_FLAGS[flag];
  return new Option(flags, description).argParser(collect);
}

/**
 * Adds the `[ID...]` argument, `--status` (one of `statuses`, described as
 * `statusDescription`), `--kind`, `--queue`, `--tag` (each repeatable) and
 * `--ids-from FILE`.
 */
export function addJobSelectionFlags(
  command: Command,
  statusDescription: string,
  statuses: readonly string[],
): Command {
  return command
    .argument('[ID...]', 'job ids')
    .addOption(repeatableChoice('--status <status>', statusDescription, statuses))
    .addOption(jobFilterOption('kind'))
    .addOption(jobFilterOption('queue'))
    .addOption(jobFilterOption('tag'))
    .option(
      '--ids-from <file>',
      'also the job ids in FILE (- for standard input), separated by whitespace or commas; only ids are then selected (an empty FILE selects no job)',
    );
}

/**
 * The filter the ID arguments and the selection flags name: only the fields
 * given are set (an empty object when none is). With `--ids-from`, `ids` is
 * set even when the file holds none, so the selection matches no job.
 *
 * @param whenNone - when given, a selection naming nothing is refused with this message.
 * @throws {UsageError} (exit 2) when an ID argument is not a job id, when
 *   `whenNone` is given and nothing is selected, or as {@link readIdsFrom}.
 */
export async function jobSelection<S extends string>(
  args: string[],
  flags: JobSelectionFlags<S>,
  whenNone?: string,
): Promise<{ ids?: string[]; status?: S[]; kind?: string[]; queue?: string[]; tags?: string[] }> {
  const ids = flags.idsFrom === undefined ? args : [...args, ...(await readIdsFrom(flags.idsFrom))];
  const bad = ids.find((id) => !isJobId(id));
  if (bad !== undefined) {
    throw new UsageError(`ID must be a job id (a positive integer up to ${MAX_JOB_ID}), got ${bad}`);
  }
  // Ids read from a file select those ids only, even none: an empty file must not widen the filters to every job.
  const selection =
    ids.length > 0 || flags.idsFrom !== undefined ? { ids, ...jobFilter(flags) } : jobFilter(flags);
  if (whenNone !== undefined && Object.keys(selection).length === 0) throw new UsageError(whenNone);
  return selection;
}

/**
 * The filter `--status`, `--kind`, `--queue` and `--tag` name: only the fields
 * of the flags given are set (an empty object when none is).
 */
export function jobFilter<S extends string>(
  flags: JobFilterFlags<S>,
): { status?: S[]; kind?: string[]; queue?: string[]; tags?: string[] } {
  const filter: { status?: S[]; kind?: string[]; queue?: string[]; tags?: string[] } = {};
  if (flags.status) filter.status = flags.status;
  if (flags.kind) filter.kind = flags.kind;
  if (flags.queue) filter.queue = flags.queue;
  if (flags.tag) filter.tags = flags.tag;
  return filter;
}
