/**
 * Where command results go: stdout, as text for people or JSON for scripts.
 */

/** Prints `value` as one JSON document on stdout (bigint ids are already strings). */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Prints lines of text on stdout. */
export function printText(text: string): void {
  process.stdout.write(`${text}\n`);
}
