/**
 * Turns whatever a handler threw into the readable text stored in `last_error`.
 * Pure: no I/O.
 */
import { inspect } from 'node:util';

/** Longest `last_error` kept, in characters; the rest is cut with a marker. */
export const MAX_ERROR_CHARS = 16_384;

/**
 * Readable text for a thrown value: an Error's stack (or name and message),
 * a string as is, anything else inspected. Always storable in a `text` column
 * (NUL escaped, lone surrogates replaced) and at most {@link MAX_ERROR_CHARS}.
 */
export function describeFailure(thrown: unknown): string {
  let text: string;
  if (thrown instanceof Error) {
    text = thrown.stack?.includes(thrown.message) ? thrown.stack : `${thrown.name}: ${thrown.message}`;
    if (thrown.cause !== undefined) text += `\ncaused by: ${describeFailure(thrown.cause)}`;
  } else if (typeof thrown === 'string') {
    text = thrown === '' ? 'handler threw an empty string' : thrown;
  } else if (thrown === undefined || thrown === null) {
    text = `handler threw ${String(thrown)} (not an Error)`;
  } else {
    text = `handler threw a non-Error value: ${inspect(thrown, { depth: 3, breakLength: Number.POSITIVE_INFINITY })}`;
  }
  text = text.replaceAll('\u0000', '\\u0000').toWellFormed();
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}… [truncated]` : text;
}
