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
  try {
    text = describeThrown(thrown, 0);
  } catch (error) {
    // A value whose getters or traps throw is described by what we can still say.
    text = `handler threw a value that cannot be described (${safeName(error)})`;
  }
  text = text.replaceAll('\u0000', '\\u0000').toWellFormed();
  return truncated(text, MAX_ERROR_CHARS);
}

/**
 * `text` as is when it has at most `maxChars` UTF-16 units, else its first
 * `maxChars` followed by `… [truncated]`; a surrogate pair at the cut is left
 * out whole, so the text stays well formed. Pure.
 */
export function truncated(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const last = text.charCodeAt(maxChars - 1);
  const end = last >= 0xd800 && last <= 0xdbff ? maxChars - 1 : maxChars;
  return `${text.slice(0, end)}… [truncated]`;
}

/** Deepest `cause` chain followed; cycles end there too. */
const MAX_CAUSE_DEPTH = 5;

function describeThrown(thrown: unknown, depth: number): string {
  if (thrown instanceof Error) {
    const message = String(thrown.message);
    const stack = typeof thrown.stack === 'string' ? thrown.stack : undefined;
    let text = stack?.includes(message) ? stack : `${String(thrown.name)}: ${message}`;
    if (thrown.cause !== undefined) {
      text +=
        depth + 1 >= MAX_CAUSE_DEPTH
          ? '\ncaused by: … (cause chain cut)'
          : `\ncaused by: ${describeThrown(thrown.cause, depth + 1)}`;
    }
    return text;
  }
  if (typeof thrown === 'string') return thrown === '' ? 'handler threw an empty string' : thrown;
  if (thrown === undefined || thrown === null) return `handler threw ${String(thrown)} (not an Error)`;
  return `handler threw a non-Error value: ${inspect(thrown, { depth: 3, breakLength: Number.POSITIVE_INFINITY })}`;
}

function safeName(error: unknown): string {
  try {
    return error instanceof Error ? `${error.name}: ${error.message}` : typeof error;
  } catch {
    return 'unknown';
  }
}
