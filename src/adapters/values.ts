/**
 * What every adapter does to values crossing another driver: parameters go
 * out as pg would send them, and rows come back as pg would return them, so
 * the statements and the row mapping stay the same whatever runs them.
 */
import pg from 'pg';
import type { QueryResultLike } from '../db/executor.js';

/** A column of a result as drivers describe it: its name and type OID. */
export interface ColumnLike {
  name: string;
  type: number;
}

/** Timestamp type OIDs (timestamptz, timestamp) whose text some drivers hand back unparsed. */
const TIMESTAMP_OIDS = new Set([1184, 1114]);

/**
 * Parameters as text the server parses: a Date becomes its ISO 8601 text, also
 * inside arrays (drivers configured to pass dates through would otherwise send
 * their `toString()`); everything else is unchanged.
 */
export function toParameters(values: readonly unknown[] | undefined): unknown[] {
  return (values ?? []).map(toParameter);
}

function toParameter(value: unknown): unknown {
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(toParameter);
  return value;
}

/**
 * {@link toParameters}, with every array sent as its PostgreSQL array text. For
 * drivers that type an array parameter by guessing from its elements:
 * postgres.js declares `[false, true]` as `boolean` (not `boolean[]`), and
 * `$2::bool[]` then fails with SQLSTATE 42846; Drizzle's postgres.js driver
 * serialises arrays without the driver's date handling. Text has no declared
 * type, so the statement's own cast (`$2::bool[]`, `$5::timestamptz[]`) types
 * it, whatever the elements: booleans, numbers, nulls, ids, an empty array.
 */
export function toArrayTextParameters(values: readonly unknown[] | undefined): unknown[] {
  return toParameters(values).map((v) => (Array.isArray(v) ? toArrayLiteral(v) : v));
}

/**
 * A one-dimensional array as PostgreSQL's array text (`{"a",NULL,"b"}`), which
 * the server parses into the parameter's declared array type. For drivers
 * whose own array serialisation depends on how the user configured them.
 */
function toArrayLiteral(values: readonly unknown[]): string {
  const items = values.map((v) =>
    v === null || v === undefined ? 'NULL' : `"${String(v).replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`,
  );
  return `{${items.join(',')}}`;
}

/**
 * Rows as pg returns them: a bigint (a driver's BigInt) as its decimal text,
 * and the text of a timestamp column (drivers configured to leave dates
 * unparsed) as a Date.
 *
 * @param columns - the result's columns, when the driver reports them; only
 *   these tell which text is a timestamp.
 */
export function toRows(rows: readonly unknown[], columns?: readonly ColumnLike[]): Record<string, unknown>[] {
  const timestamps = (columns ?? []).filter((c) => TIMESTAMP_OIDS.has(c.type)).map((c) => c.name);
  return rows.map((row) => {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(row as Record<string, unknown>)) {
      out[key] = typeof value === 'bigint' ? value.toString() : value;
    }
    for (const name of timestamps) {
      const value = out[name];
      if (typeof value === 'string') out[name] = parseTimestamptz(value);
    }
    return out;
  });
}

/** pg's own parser of timestamp text (it reads both types: without a zone, as local time, as pg does). */
const parseTimestamptz = pg.types.getTypeParser(1184, 'text') as (text: string) => Date;

/** A result with `rowCount` from what a driver reported, or the number of rows. */
export function toResult(
  rows: readonly unknown[],
  rowCount: number | bigint | null | undefined,
  columns?: readonly ColumnLike[],
): QueryResultLike<Record<string, unknown>> {
  return { rows: toRows(rows, columns), rowCount: rowCount == null ? rows.length : Number(rowCount) };
}
