/**
 * Reading jobs for people: one by id, a filtered page, and counts per queue
 * and status. Nothing here changes a row.
 */
import type { JobRecord, JobStatus, JobSummary } from '../../job/job.js';
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
  count: number;
  /** Milliseconds since the oldest due queued job's run_at; null for other statuses or when none is due. */
  oldestQueuedAgeMs: number | null;
}

/** The read-only statements. */
export class InspectQueries {
  readonly #byId: Statement;
  readonly #list: Record<ListOrder, Statement>;
  readonly #listPreview: Record<ListOrder, Statement>;
  readonly #stats: Statement;

  constructor(names: SchemaNames) {
    const { jobs, statement } = names;
    this.#byId = statement('get_by_id', `SELECT ${JOB_COLUMNS} FROM ${jobs} WHERE id = $1`);
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
    this.#stats = statement(
      'stats',
      `SELECT queue, status, count(*)::int AS count,
              (EXTRACT(EPOCH FROM now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())) * 1000)::float8
                AS oldest_queued_age_ms
       FROM ${jobs}
       GROUP BY queue, status
       ORDER BY queue, status`,
    );
  }

  /** One job by id, or undefined. */
  async getById(db: Queryable, id: string): Promise<JobRecord | undefined> {
    const { rows } = await run<JobRow>(db, this.#byId, [id]);
    return rows[0] ? toJobRecord(rows[0]) : undefined;
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

  /** Counts per queue and status, and the oldest due queued job's age. */
  async stats(db: Queryable): Promise<QueueStatsRow[]> {
    const { rows } = await run<{
      queue: string;
      status: JobStatus;
      count: number;
      oldest_queued_age_ms: number | null;
    }>(db, this.#stats, []);
    return rows.map((r) => ({
      queue: r.queue,
      status: r.status,
      count: r.count,
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
