/**
 * Where command results go: stdout, as text for people or JSON for scripts;
 * errors go to stderr, one line each, all with the same `skiplock: error:` prefix.
 */

/** The prefix of every error line the command line prints. */
export const ERROR_PREFIX = 'skiplock: error: ';

/** Prints `value` as one JSON document on stdout (bigint ids are already strings). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Prints lines of text on stdout. */
export function printText(text: string): void {
  process.stdout.write(`${text}\n`);
}

/** Prints an error for people on stderr: `skiplock: error: <message>`. */
export function printError(message: string): void {
  process.stderr.write(`${ERROR_PREFIX}${message}\n`);
}
