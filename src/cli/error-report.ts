/**
 * How the command line reports an error that ends a command: one line on
 * stderr (`skiplock: error: …`, plus a `cause:` line only when the cause adds
 * something, or the help hint after a usage error) and the exit code: 2 for
 * usage errors, 1 for the rest.
 */
import { CommanderError } from 'commander';
import { ValidationError } from '../errors.js';
import { MissingDependencyError } from '../optional-dependency.js';
import { ERROR_PREFIX, printError } from './output.js';
import { UsageError } from './usage-error.js';

/** The line after a usage error, as commander prints it after its own. */
export const USAGE_HINT = '(add --help for usage)';

/**
 * Prints `error` for people and returns the exit code: 0 for commander's
 * `--help`/`--version` exits, 2 for usage errors (commander's, {@link UsageError},
 * the library's `ValidationError`), 1 for everything else. Set `SKIPLOCK_DEBUG=1`
 * to get the stack as well.
 */
export function reportError(error: unknown): number {
  // Commander has printed its own message (through commanderOutputError).
  if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
  // A usage error found by a command ends as commander's own do, with the help hint.
  if (error instanceof UsageError || error instanceof ValidationError) {
    printError(
      error instanceof UsageError ? error.message : `invalid ${flagOf(error.field)}: ${error.reason}`,
    );
    process.stderr.write(`${USAGE_HINT}\n`);
    return 2;
  }
  if (error instanceof MissingDependencyError) {
    // The message says what to install; the loader's "cannot find package" adds nothing.
    printError(error.message);
    return 1;
  }
  const message = errorMessage(error);
  printError(message);
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause !== undefined) {
    const causeMessage = errorMessage(cause);
    if (causeMessage !== '' && !message.includes(causeMessage))
      process.stderr.write(`  cause: ${causeMessage}\n`);
  }
  if (process.env.SKIPLOCK_DEBUG && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  return 1;
}

/**
 * The text of an error on one line. An `AggregateError` (a connection to a host
 * name with several addresses) has no message of its own: its errors' distinct
 * messages are joined instead.
 */
export function errorMessage(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  let message = error.message;
  if (message === '' && error instanceof AggregateError) {
    message = [...new Set(error.errors.map(errorMessage))].join('; ');
  }
  if (message === '') message = (error as NodeJS.ErrnoException).code ?? error.name;
  return message.replace(/\s*\n\s*/g, ' ').trim();
}

/**
 * Commander's `outputError`: its messages (`error: unknown option '--x'`) get
 * the same prefix as every other error line.
 */
export function commanderOutputError(text: string, write: (text: string) => void): void {
  write(text.replace(/^error: /, ERROR_PREFIX));
}

/** The flag or argument a library field came from: `worker.heartbeatIntervalMs` → `--heartbeat-interval-ms`. */
function flagOf(field: string): string {
  if (field === 'kind' || field === 'cron' || field === 'name') return field.toUpperCase();
  if (/^(filter\.)?ids(\[\d+\])?$/.test(field)) return 'ID';
  if (/^payload($|[.[])/.test(field)) return `PAYLOAD_JSON${field.slice('payload'.length)}`;
  const name = field
    .replace(/^(worker|options|filter)\./, '')
    .replace(/^queues\[\d+\]$/, 'queue')
    .replace(/^tags(\[\d+\])?$/, 'tag');
  const flag = (option: string) => `--${option.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  if (/^[a-z][a-zA-Z]*$/.test(name)) return flag(name);
  // A part of one flag's value (`rate.count` of `--rate 0/1s`): the flag, then the part.
  const part = /^([a-z][a-zA-Z]*)\.([a-z][a-zA-Z]*)$/.exec(name);
  if (part) return `${flag(part[1]!)} (${part[2]})`;
  return field;
}
