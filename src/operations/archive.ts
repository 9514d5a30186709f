/**
 * `skiplock.listArchivedJobs(filter)`: pages of the archive for people, newest
 * first, by kind, queue, finish time, tags and payload fields. Checks the
 * filter, then reads one page with one statement.
 */
import type pg from 'pg';
import { z } from 'zod';
import type { ArchiveCursor, ArchivedJobSummary, ArchiveFilter } from '../db/queries/archive.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { ValidationError } from '../errors.js';
import { isJobId } from '../job/defaults.js';
import { serializePayload, typeName } from '../job/job.js';
import { integerInRange, parseOptions } from '../options.js';
import { type ClientOption, queryable } from '../producer/job-options.js';
import { storableName, toTagFilter } from './operations.js';

export type { ArchivedJobSummary };

/** Longest payload filter, in bytes of UTF-8 JSON. */
export const MAX_PAYLOAD_FILTER_BYTES = 4096;

/** Filter and page of `listArchivedJobs`; every filter optional, all given ones must match. */
export interface ListArchivedJobsFilter extends ClientOption {
  kind?: string;
  queue?: string;
  /** Archived jobs finished at or after this instant. */
  since?: Date;
  /** Archived jobs finished before this instant. */
  until?: Date;
  /** Only archived jobs having every one of these tags (one tag, or up to 20). */
  tags?: string | string[];
  /**
   * Only archived jobs whose payload contains this JSON object: every field
   * given, with that value (JSON containment, `payload @> …`; nested objects
   * match as subsets, arrays as sets of elements). At least one field, at most
   * 4096 bytes of JSON. For example `{ customerId: 42 }`.
   */
  payload?: Record<string, unknown>;
  /** Most jobs returned (1–1000). @default 50 */
  limit?: number;
  /** Continue after this job: the `cursor` of the previous page's last job. */
  before?: string;
  /** Characters of each payload's JSON text read as its preview (1–100000). @default 200 */
  payloadPreviewChars?: number;
}

/** A Date PostgreSQL's timestamptz holds as given: valid, from the year 1 on. */
const instant = z
  .date({ error: 'must be a Date' })
  .refine((d) => !Number.isNaN(d.getTime()), { error: 'must be a valid Date' })
  .refine((d) => d.getUTCFullYear() >= 1, { error: 'must be in the year 1 or later' });

const listArchivedSchema = z.strictObject({
  client: queryable.optional(),
  kind: storableName.optional(),
  queue: storableName.optional(),
  since: instant.optional(),
  until: instant.optional(),
  // Checked by toTagFilter and toPayloadFilter, which word the errors.
  tags: z.unknown().optional(),
  payload: z.unknown().optional(),
  limit: integerInRange(1, 1000).optional(),
  before: z.string({ error: "must be a string (a job's cursor)" }).optional(),
  payloadPreviewChars: integerInRange(1, 100_000).optional(),
});

/**
 * A page of archived jobs matching the filter, newest finish first.
 *
 * @throws {ValidationError} naming the field on a bad filter.
 */
export async function listArchivedJobs(
  queries: JobQueries,
  pool: pg.Pool,
  filter: unknown,
): Promise<ArchivedJobSummary[]> {
  const parsed = parseOptions(listArchivedSchema, filter, 'filter');
  const archiveFilter: ArchiveFilter = {
    kind: parsed.kind,
    queue: parsed.queue,
    since: parsed.since,
    until: parsed.until,
    tags: toTagFilter(parsed.tags, 'filter.tags'),
    payload: toPayloadFilter(parsed.payload, 'filter.payload'),
  };
  const before = parsed.before === undefined ? undefined : toCursor(parsed.before, 'filter.before');
  return queries.archive.list(
    parsed.client ?? pool,
    archiveFilter,
    before,
    parsed.limit ?? 50,
    parsed.payloadPreviewChars ?? 200,
  );
}

/**
 * A payload filter: a plain JSON object of at least one field, at most
 * {@link MAX_PAYLOAD_FILTER_BYTES} bytes of JSON.
 *
 * @throws {ValidationError} naming `field`, or the path inside it (`filter.payload.items[2]`).
 */
export function toPayloadFilter(value: unknown, field: string): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ValidationError(field, `must be an object of payload fields, got ${typeName(value)}`);
  }
  const json = serializePayload(value, field);
  if (json === '{}') throw new ValidationError(field, 'must hold at least one field');
  if (Buffer.byteLength(json, 'utf8') > MAX_PAYLOAD_FILTER_BYTES) {
    throw new ValidationError(field, `must be at most ${MAX_PAYLOAD_FILTER_BYTES} bytes of JSON`);
  }
  return value as Record<string, unknown>;
}

const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)~(\d+)$/;

/** Reads a page cursor (`<finished_at to the microsecond>~<id>`). @throws {ValidationError} naming `field`. */
function toCursor(value: string, field: string): ArchiveCursor {
  const match = CURSOR.exec(value);
  const finishedAt = match?.[1];
  const id = match?.[2];
  // Date rolls 2026-02-30 over into March: the instant must print back as given.
  const iso = finishedAt === undefined ? '' : `${finishedAt.slice(0, 23)}Z`;
  const date = new Date(iso);
  if (
    finishedAt === undefined ||
    id === undefined ||
    Number.isNaN(date.getTime()) ||
    date.getUTCFullYear() < 1 ||
    date.toISOString() !== iso ||
    !isJobId(id)
  ) {
    throw new ValidationError(field, "must be an archived job's cursor, as a page returned it");
  }
  return { finishedAt, id };
}
