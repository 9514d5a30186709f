/**
 * The schema name: the only identifier in skiplock's SQL that varies. It is
 * validated and quoted here, once, when a Skiplock is made; every value is a
 * bind parameter.
 */
import { ValidationError } from '../errors.js';

/** The default schema. */
export const DEFAULT_SCHEMA = 'skiplock';

/**
 * Longest schema name, in bytes: the NOTIFY channel `skiplock:<schema>` must fit
 * PostgreSQL's 63-byte identifier limit.
 */
export const MAX_SCHEMA_BYTES = 54;

/**
 * Schemas every role may find on its search path or that PostgreSQL keeps for
 * itself; refused unless the caller opts in (see {@link assertSchemaName}).
 */
export const SHARED_SCHEMAS: readonly string[] = ['public', 'information_schema'];

/**
 * Checks a schema name. Any characters are allowed (the name is always quoted),
 * except NUL and lone surrogates; the prefix `pg_` is PostgreSQL's. `public`
 * and `information_schema` are refused unless `allowSharedSchema` is true:
 * `public` is on every role's default search path and, on PostgreSQL 14 and
 * older, every role may create objects in it, so any role could plant a
 * function or operator there that a privileged role's statements then call.
 *
 * @throws {ValidationError} (field `schema`) when empty, too long, unstorable,
 *   starting with `pg_`, or a shared schema without `allowSharedSchema`.
 */
export function assertSchemaName(schema: unknown, allowSharedSchema = false): asserts schema is string {
  if (typeof schema !== 'string' || schema.length === 0)
    throw new ValidationError('schema', 'must be a non-empty string');
  if (schema.includes('\u0000') || !schema.isWellFormed())
    throw new ValidationError('schema', 'must be valid text without NUL');
  if (Buffer.byteLength(schema, 'utf8') > MAX_SCHEMA_BYTES) {
    throw new ValidationError('schema', `must be at most ${MAX_SCHEMA_BYTES} bytes of UTF-8`);
  }
  if (schema.startsWith('pg_'))
    throw new ValidationError('schema', 'names starting with pg_ are reserved by PostgreSQL');
  if (SHARED_SCHEMAS.includes(schema) && !allowSharedSchema) {
    throw new ValidationError(
      'schema',
      `${JSON.stringify(schema)} is shared with every role: give skiplock a schema of its own ` +
        '(or set allowSharedSchema: true, see docs/security.md)',
    );
  }
}

/** Quotes an identifier the way PostgreSQL's `quote_ident` does: `"` doubled, always quoted. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The LISTEN/NOTIFY channel of a schema; the trigger in 0001_jobs.sql builds the same text. */
export function channelName(schema: string): string {
  return `skiplock:${schema}`;
}

/** Key text of the transaction-scoped advisory lock for one task in one schema. */
export function advisoryLockKey(task: 'migrate' | MaintenanceTask, schema: string): string {
  return `skiplock:${task}:${schema}`;
}

/** Maintenance tasks that run one at a time across all processes, each under its own advisory lock. */
export type MaintenanceTask = 'sweep' | 'schedule' | 'prune' | 'archive' | 'parents';
