/**
 * Option validation: zod schemas in, {@link ValidationError} out, so every bad
 * option is reported with the field's path before anything touches the database.
 */
import { z } from 'zod';
import { ValidationError } from './errors.js';

/**
 * Parses `value` with `schema`; the first problem becomes a ValidationError
 * whose `field` is `prefix.path.to.field`.
 *
 * @throws {ValidationError} on an unknown key or a value out of type or range.
 */
export function parseOptions<T>(schema: z.ZodType<T>, value: unknown, prefix: string): T {
  const result = schema.safeParse(value === undefined ? {} : value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const path = issue.path.reduce<string>(
    (acc, segment) =>
      typeof segment === 'number'
        ? `${acc}[${segment}]`
        : acc
          ? `${acc}.${String(segment)}`
          : String(segment),
    prefix,
  );
  if (issue.code === 'unrecognized_keys') {
    const key = issue.keys[0]!;
    throw new ValidationError(path ? `${path}.${key}` : key, 'unknown option');
  }
  throw new ValidationError(path || 'options', issue.message);
}

/**
 * A copy of `values` without the entries that are `undefined`, keys in their
 * order. Options built from flags or parsed input go through it because a
 * field set to `undefined` is not a field left out: `exactOptionalPropertyTypes`
 * refuses it, strict schemas still see the key, and "was anything given"
 * checks count keys. `null` is kept (it means "remove" in some options).
 * Never throws.
 */
export function definedOnly<T extends object>(values: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  const defined: Partial<Record<keyof T, unknown>> = {};
  for (const key of Object.keys(values) as (keyof T)[]) {
    if (values[key] !== undefined) defined[key] = values[key];
  }
  return defined as { [K in keyof T]?: Exclude<T[K], undefined> };
}

/** An integer within [min, max]. */
export function integerInRange(min: number, max: number) {
  // The range first: a number past it (2 ** 53, say) is told so, not that it is no (safe) integer.
  return z
    .number({ error: 'must be a number' })
    .min(min, { error: `must be ≥ ${min}` })
    .max(max, { error: `must be ≤ ${max}` })
    .int({ error: 'must be an integer' });
}

/** A 32-bit signed integer, as PostgreSQL's `int`. */
export const int32 = z
  .number({ error: 'must be a number' })
  .int({ error: 'must be an integer' })
  .min(-2_147_483_648, { error: 'must fit a 32-bit integer' })
  .max(2_147_483_647, { error: 'must fit a 32-bit integer' });

/** A duration in milliseconds: a finite number ≥ `min`. */
export function durationMs(min: number) {
  return z
    .number({ error: 'must be a number of milliseconds' })
    .refine(Number.isFinite, { error: 'must be finite' })
    .refine((v) => v >= min, { error: `must be ≥ ${min}` })
    .refine((v) => v <= 2_147_483_647, { error: 'must be ≤ 2147483647 (about 24.8 days)' });
}

const MIN_DATE_MS = -62_135_596_800_000; // 0001-01-01T00:00:00Z (Date.UTC maps years 0–99 to 19xx)
const MAX_DATE_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** A valid Date between the years 1 and 9999 (safely inside PostgreSQL's timestamptz range). */
export const validDate = z
  .custom<Date>((v) => v instanceof Date && !Number.isNaN(v.getTime()), { error: 'must be a valid Date' })
  .refine((d) => d.getTime() >= MIN_DATE_MS && d.getTime() <= MAX_DATE_MS, {
    error: 'must be between the years 1 and 9999',
  });

/**
 * Refuses a key of `options` not in `known` (a misspelt option would otherwise
 * be ignored, its default silently used).
 *
 * @throws {ValidationError} naming `field.key`: unknown option.
 */
export function refuseUnknownOptions(options: object, field: string, known: readonly string[]): void {
  for (const key of Object.keys(options))
    if (!known.includes(key)) throw new ValidationError(`${field}.${key}`, 'unknown option');
}
