/**
 * Reading the archive (`jobs_archive`) for people: a page of archived jobs,
 * newest first, by kind, queue, a range of finish times, tags and payload
 * fields. Nothing here changes a row.
 */
import type { JobSummary } from '../../job/job.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { JOB_COLUMNS_BUT_PAYLOAD, type JobSummaryRow, toJobSummary } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** Filter of an archive page; every field optional, all given fields must match. */
export interface ArchiveFilter {
  kind?: string | undefined;
  queue?: string | undefined;
  /** Finished at or after this instant. */
  since?: Date | undefined;
  /** Finished before this instant. */
  until?: Date | undefined;
  /** Archived jobs having every one of these tags (`tags @> …`, through the archive's tags index). */
  tags?: string[] | undefined;
  /** Archived jobs whose payload contains this JSON object (`payload @> …`, through the payload index). */
  payload?: Record<string, unknown> | undefined;
}

/** Where a page starts, newest first: after the row with this finish time (to the microsecond) and id. */
export interface ArchiveCursor {
  /** finished_at as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC). */
  finishedAt: string;
  id: string;
}

/** One archived job of a page: a {@link JobSummary} with its finish time and its page cursor. */
export interface ArchivedJobSummary extends JobSummary {
  finishedAt: Date;
  /** This row's place in the archive's order: pass it as `before` for the page after it. */
  cursor: string;
}

/** The archive's read statements. */
export class ArchiveQueries {
  readonly #list: Statement;

  constructor(names: SchemaNames) {
    // Newest first by (finished_at, id). Sent as text, not prepared, so each
    // call is planned for its values: the filters left out fold away, and the
    // plan fits those given. With kind, queue or a time range alone, each day
    // partition's finished_at index (or its (kind, finished_at) or (queue,
    // finished_at) index) is read backwards and stops at the page's end; with
    // tags or payload fields, the matching rows come from the partitions' GIN
    // indexes and only those are sorted. The page is cut before the payloads
    // are turned into text, so only its rows pay for their preview.
    this.#list = names.statement(
      'archive_list',
      `SELECT ${JOB_COLUMNS_BUT_PAYLOAD},
              left(p.text, $10) AS payload_preview, length(p.text) > $10 AS payload_truncated,
              to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS cursor_at
       FROM (SELECT * FROM ${names.archive}
             WHERE finished_at IS NOT NULL
               AND ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR queue = $2)
               AND ($3::timestamptz IS NULL OR finished_at >= $3) AND ($4::timestamptz IS NULL OR finished_at < $4)
               AND ($5::timestamptz IS NULL OR (finished_at, id) < ($5, $6::bigint))
               AND ($7::text[] IS NULL OR tags @> $7::text[])
               AND ($8::jsonb IS NULL OR payload @> $8::jsonb)
             ORDER BY finished_at DESC, id DESC
             LIMIT $9) a
       CROSS JOIN LATERAL (SELECT a.payload::text AS text) p
       ORDER BY finished_at DESC, id DESC`,
    );
  }

  /** One page of archived jobs, newest first, each payload read as its first `previewChars` characters. */
  async list(
    db: Queryable,
    filter: ArchiveFilter,
    before: ArchiveCursor | undefined,
    limit: number,
    previewChars: number,
  ): Promise<ArchivedJobSummary[]> {
    const { rows } = await run<JobSummaryRow & { cursor_at: string }>(db, this.#list, [
      filter.kind ?? null,
      filter.queue ?? null,
      filter.since ?? null,
      filter.until ?? null,
      before?.finishedAt ?? null,
      before?.id ?? null,
      filter.tags ?? null,
      filter.payload === undefined ? null : JSON.stringify(filter.payload),
      limit,
      previewChars,
    ]);
    return rows.map(({ cursor_at, ...row }) => ({
      ...toJobSummary(row),
      finishedAt: row.finished_at as Date,
      cursor: `${cursor_at}~${row.id}`,
    }));
  }
}
