/**
 * Reading jobs for people: one by id, a filtered page, and counts per queue
 * and status. Nothing here changes a row.
 */
import type { JobRecord, JobStatus, JobSummary } from '../../job/job.js';
import { toLogLines } from '../../workflow/job-output.js';
import { type Queryable, run, type Statement } from '../executor.js';
import {
  JOB_COLUMNS,
  JOB_COLUMNS_BUT_PAYLOAD,
  type JobRow,
  type JobSummaryRow,
  toJobRecord,
  toJobSummary,
} from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** Filter of `requeue` and `list`; every field optional, all given fields must match. */
export interface JobFilter {
  ids?: string[];
  status?: JobStatus[];
  kind?: string[];
  queue?: string[];
  /** Jobs having every one of these tags (`tags @> …`, through the tags index). */
  tags?: string[];
}

/** Order of a listing: newest id first (the default for people) or oldest first. */
export type ListOrder = 'newest' | 'oldest';

/** One page of a listing. */
export interface ListPage {
  limit: number;
  order: ListOrder;
  /** Continue after this job id, in the listing's order (the last id of the previous page). */
  after: string | undefined;
}

/** Per queue and status: counts and the age of the oldest due job. */
export interface QueueStatsRow {
  queue: string;
  status: JobStatus;
  /** Rows of this queue and status; an estimate when `estimated`. */
  count: number;
  /**
   * True when `count` is estimated from a sample of the table: failed and
   * dead, or succeeded, cancelled and waiting, jobs once that group holds
   * {@link EXACT_COUNT_LIMIT} rows or more. Queued and running counts are exact.
   */
  estimated: boolean;
  /** Milliseconds since the oldest due queued job's run_at; null for other statuses or when none is due. */
  oldestQueuedAgeMs: number | null;
}

/** Below this many failed and dead (or succeeded, cancelled and waiting) jobs, stats() counts them exactly. */
export const EXACT_COUNT_LIMIT = 10_000;

/** Pages of the jobs table read by stats() to estimate a larger group (8 MiB of 8 KiB pages). */
export const STATS_SAMPLE_PAGES = 1000;

/** The read-only statements. */
export class InspectQueries {
  readonly #byId: Statement;
  readonly #list: Record<ListOrder, Statement>;
  readonly #listPreview: Record<ListOrder, Statement>;
  readonly #stats: Statement;
  readonly #jobsTable: string;

  constructor(names: SchemaNames) {
    const { jobs, statement } = names;
    this.#byId = statement(
      'get_by_id',
      `SELECT ${JOB_COLUMNS}, result, progress, logs FROM ${jobs} WHERE id = $1`,
    );
    // The filters, order and page shared by both shapes of a list (whole rows, or payload previews).
    const page = (cursor: string, order: string, tags: string) =>
      `WHERE ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
         AND ($2::text[] IS NULL OR status = ANY($2::text[]))
         AND ($3::text[] IS NULL OR kind = ANY($3::text[]))
         AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
         AND ($6::bigint IS NULL OR ${cursor})
         AND (${tags}::text[] IS NULL OR tags @> ${tags}::text[])
       ORDER BY ${order}
       LIMIT $5`;
    const list = (cursor: string, order: string) =>
      `SELECT ${JOB_COLUMNS} FROM ${jobs} ${page(cursor, order, '$7')}`;
    this.#list = {
      newest: statement('list_newest', list('id < $6', 'id DESC')),
      oldest: statement('list_oldest', list('id > $6', 'id')),
    };
    // Only the start of each payload's text crosses the wire: a list never reads whole payloads.
    const preview = (cursor: string, order: string) =>
      `SELECT ${JOB_COLUMNS_BUT_PAYLOAD}, left(p.text, $7) AS payload_preview, length(p.text) > $7 AS payload_truncated
       FROM ${jobs} CROSS JOIN LATERAL (SELECT payload::text AS text) p
       ${page(cursor, order, '$8')}`;
    this.#listPreview = {
      newest: statement('list_preview_newest', preview('id < $6', 'id DESC')),
      oldest: statement('list_preview_oldest', preview('id > $6', 'id')),
    };
    // Counts that stay cheap at any volume: queued and running jobs through
    // their partial indexes, exactly. Failed and dead jobs, and succeeded,
    // cancelled and waiting ones, are counted exactly while each group has
    // fewer than $1 rows (read with LIMIT $1, so never more); a larger group
    // is estimated from a sample of about $2 pages, scaled by the table's
    // size, and its rows say so. Nothing reads a payload.
    this.#stats = statement(
      'stats',
      `WITH failed AS (
         SELECT queue, status FROM ${jobs} WHERE status IN ('failed', 'dead') LIMIT $1
       ), kept AS (
         SELECT queue, status FROM ${jobs} WHERE status IN ('succeeded', 'cancelled', 'waiting') LIMIT $1
       ), big AS (
         SELECT (SELECT count(*) FROM failed) >= $1 AS failed, (SELECT count(*) FROM kept) >= $1 AS kept,
                LEAST(100, 100.0 * $2 / GREATEST(pg_catalog.pg_relation_size($3::regclass)
                  / pg_catalog.current_setting('block_size')::int, 1))::float4 AS percent
       ), counted AS (
         SELECT queue, status, count(*)::float8 AS n,
                min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due, false AS estimated
         FROM ${jobs} WHERE status = 'queued' GROUP BY queue, status
         UNION ALL
         SELECT queue, status, count(*), NULL, false
         FROM ${jobs} WHERE locked_at IS NOT NULL AND status = 'running' GROUP BY queue, status
         UNION ALL
         SELECT queue, status, count(*), NULL, false
         FROM failed WHERE NOT (SELECT failed FROM big) GROUP BY queue, status
         UNION ALL
         SELECT queue, status, count(*), NULL, false
         FROM kept WHERE NOT (SELECT kept FROM big) GROUP BY queue, status
         UNION ALL
         SELECT queue, status, count(*) * 100.0 / (SELECT percent FROM big), NULL, true
         FROM ${jobs} TABLESAMPLE SYSTEM ((SELECT percent FROM big))
         WHERE ((SELECT failed FROM big) OR (SELECT kept FROM big))
           AND ((status IN ('failed', 'dead') AND (SELECT failed FROM big))
             OR (status IN ('succeeded', 'cancelled', 'waiting') AND (SELECT kept FROM big)))
       GROUP BY queue, status
       )
       SELECT queue, status, round(n)::int AS count, estimated,
              (EXTRACT(EPOCH FROM now() - oldest_due) * 1000)::float8 AS oldest_queued_age_ms
       FROM counted
       ORDER BY queue, status`,
    );
    this.#jobsTable = jobs;
  }

  /** One job by id, or undefined. */
  async getById(db: Queryable, id: string): Promise<JobRecord | undefined> {
    const { rows } = await run<JobRow & { result: unknown; progress: unknown; logs: unknown }>(
      db,
      this.#byId,
      [id],
    );
    const row = rows[0];
    if (!row) return undefined;
    return { ...toJobRecord(row), result: row.result, progress: row.progress, logs: toLogLines(row.logs) };
  }

  /** One page of the jobs matching the filter. */
  async list(db: Queryable, filter: JobFilter, page: ListPage): Promise<JobRecord[]> {
    const { rows } = await run<JobRow>(db, this.#list[page.order], [
      ...listValues(filter, page),
      filter.tags ?? null,
    ]);
    return rows.map(toJobRecord);
  }

  /** One page of the jobs matching the filter, each payload read as its first `previewChars` characters. */
  async listPreviews(
    db: Queryable,
    filter: JobFilter,
    page: ListPage,
    previewChars: number,
  ): Promise<JobSummary[]> {
    const { rows } = await run<JobSummaryRow>(db, this.#listPreview[page.order], [
      ...listValues(filter, page),
      previewChars,
      filter.tags ?? null,
    ]);
    return rows.map(toJobSummary);
  }

  /** Counts per queue and status (some estimated at volume), and the oldest due queued job's age. */
  async stats(db: Queryable): Promise<QueueStatsRow[]> {
    const { rows } = await run<{
      queue: string;
      status: JobStatus;
      count: number;
      estimated: boolean;
      oldest_queued_age_ms: number | null;
    }>(db, this.#stats, [EXACT_COUNT_LIMIT, STATS_SAMPLE_PAGES, this.#jobsTable]);
    return rows.map((r) => ({
      queue: r.queue,
      status: r.status,
      count: r.count,
      estimated: r.estimated,
      oldestQueuedAgeMs: r.oldest_queued_age_ms,
    }));
  }
}

/** The list statements' parameters $1 to $6: the filter, then the page. */
function listValues(filter: JobFilter, page: ListPage): unknown[] {
  return [
    filter.ids ?? null,
    filter.status ?? null,
    filter.kind ?? null,
    filter.queue ?? null,
    page.limit,
    page.after ?? null,
  ];
}
