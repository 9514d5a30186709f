/**
 * Tags: labels a producer puts on a job so that operators can find, cancel and
 * requeue jobs together. The rules a list of tags must satisfy before it
 * reaches the database. Pure: no I/O.
 */
import { ValidationError } from '../errors.js';
import { assertStorableString, typeName } from './job.js';

/** Most tags on one job (and in one filter). */
export const MAX_TAGS = 20;

/** Longest tag, in characters (Unicode code points, as PostgreSQL's `char_length` counts them). */
export const MAX_TAG_CHARS = 100;

/**
 * Checks a list of tags: an array of at most {@link MAX_TAGS} distinct,
 * non-empty strings of at most {@link MAX_TAG_CHARS} characters each, which
 * PostgreSQL can store (no NUL, no lone surrogate). Tags are data: any other
 * string (quotes, SQL, unicode, spaces) is kept as given.
 *
 * @returns the tags as given; undefined for an empty array (a job without tags).
 * @throws {ValidationError} naming `field`, or the offending tag (`field[2]`).
 */
export function toTags(value: unknown, field: string): string[] | undefined {
  if (!Array.isArray(value)) {
    throw new ValidationError(field, `must be an array of strings, got ${typeName(value)}`);
  }
  if (value.length > MAX_TAGS) throw new ValidationError(field, `must hold at most ${MAX_TAGS} tags`);
  const seen = new Set<string>();
  for (let i = 0; i < value.length; i++) {
    const tagField = `${field}[${i}]`;
    if (!(i in value)) throw new ValidationError(tagField, 'must be a string, got an array hole');
    const tag: unknown = value[i];
    if (typeof tag !== 'string')
      throw new ValidationError(tagField, `must be a string, got ${typeName(tag)}`);
    if (tag.length === 0) throw new ValidationError(tagField, 'must not be empty');
    assertStorableString(tag, tagField);
    // Code points: a UTF-16 unit count is an upper bound, so only long tags are counted.
    if (tag.length > MAX_TAG_CHARS && [...tag].length > MAX_TAG_CHARS) {
      throw new ValidationError(tagField, `must be at most ${MAX_TAG_CHARS} characters`);
    }
    if (seen.has(tag)) throw new ValidationError(tagField, `repeats the tag ${JSON.stringify(tag)}`);
    seen.add(tag);
  }
  return value.length === 0 ? undefined : [...(value as string[])];
}
