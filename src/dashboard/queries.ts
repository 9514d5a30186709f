/**
 * The dashboard's own statements, for what the Skiplock API does not offer:
 * jobs newest first with a cursor, one job from the archive, delete by id, and
 * finished jobs per minute. Every value is a bind parameter; the schema is the
 * only identifier that varies, and it is quoted once here.
 */
import type pg from 'pg';
import { quoteIdent } from '../db/sql.js';
import type { JobRecord, JobStatus } from '../job/job.js';

/** A row of `jobs` or `jobs_archive` as selected below. */
interface JobRow {
  id: string;
  queue: string;
  kind: string;
  payload: unknown;
  status: JobStatus;
  priority: number;
  run_at: Date;
  attempts: number;
  max_attempts: number;
  locked_at: Date | null;
  locked_by: string | null;
  lease_seq: string;
  last_error: string | null;
  created_at: Date;
  finished_at: Date | null;
}

const COLUMNS =
  'id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, locked_at, locked_by, lease_seq::text AS lease_seq, last_error, created_at, finished_at';

/** Filter of {@link DashboardQueries.listNewestFirst}; unset fields match every job. */
export interface NewestFirstFilter {
  status?: string | undefined;
  kind?: string | undefined;
  queue?: string | undefined;
  /** Only jobs whose id is smaller (the cursor of the next page), a decimal string. */
  beforeId?: string | undefined;
  /** Most jobs returned. */
  limit: number;
}

/** Finished jobs of one minute of the last hour. */
export interface ThroughputBucket {
  /** Whole minutes before now: 0 is the current minute, 59 the oldest. */
  minutesAgo: number;
  /** Succeeded jobs kept in the table or archived (deleted ones leave no row). */
  succeeded: number;
  /** Jobs that ended `failed` or `dead`. */
  failed: number;
}

/** The dashboard's statements on one schema. */
export class DashboardQueries {
  readonly #list: string;
  readonly #archived: string;
  readonly #delete: string;
  readonly #throughput: string;

  constructor(schema: string) {
    const s = quoteIdent(schema);
    this.#list = `SELECT ${COLUMNS} FROM ${s}.jobs
      WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2)
        AND ($3::text IS NULL OR queue = $3) AND ($4::bigint IS NULL OR id < $4::bigint)
      ORDER BY id DESC LIMIT $5`;
    this.#archived = `SELECT ${COLUMNS} FROM ${s}.jobs_archive WHERE id = $1`;
    // A running job's lease belongs to a worker: it is cancelled, not deleted under it.
    this.#delete = `DELETE FROM ${s}.jobs WHERE id = $1 AND status <> 'running' RETURNING id`;
    this.#throughput = `SELECT floor(EXTRACT(EPOCH FROM now() - finished_at) / 60)::int AS minutes_ago,
             count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
             count(*) FILTER (WHERE status IN ('failed', 'dead'))::int AS failed
      FROM (SELECT status, finished_at FROM ${s}.jobs WHERE finished_at > now() - interval '1 hour'
            UNION ALL
            SELECT status, finished_at FROM ${s}.jobs_archive WHERE finished_at > now() - interval '1 hour') f
      WHERE finished_at <= now()
      GROUP BY 1 ORDER BY 1`;
  }

  /** Jobs matching the filter, newest (largest id) first. */
  async listNewestFirst(pool: pg.Pool, filter: NewestFirstFilter): Promise<JobRecord[]> {
    const { rows } = await pool.query<JobRow>(this.#list, [
      filter.status ?? null,
      filter.kind ?? null,
      filter.queue ?? null,
      filter.beforeId ?? null,
      filter.limit,
    ]);
    return rows.map(toRecord);
  }

  /** A job moved to `jobs_archive` on success, or undefined. */
  async getArchived(pool: pg.Pool, id: string): Promise<JobRecord | undefined> {
    const { rows } = await pool.query<JobRow>(this.#archived, [id]);
    return rows[0] ? toRecord(rows[0]) : undefined;
  }

  /** Deletes a job that is not running. @returns whether a row was deleted. */
  async deleteJob(pool: pg.Pool, id: string): Promise<boolean> {
    const { rowCount } = await pool.query(this.#delete, [id]);
    return rowCount === 1;
  }

  /** Finished jobs per minute over the last hour, 60 buckets oldest first, from `finished_at`. */
  async throughput(pool: pg.Pool): Promise<ThroughputBucket[]> {
    const { rows } = await pool.query<{ minutes_ago: number; succeeded: number; failed: number }>(
      this.#throughput,
    );
    const buckets: ThroughputBucket[] = [];
    for (let minutesAgo = 59; minutesAgo >= 0; minutesAgo--) {
      const row = rows.find((r) => r.minutes_ago === minutesAgo);
      buckets.push({ minutesAgo, succeeded: row?.succeeded ?? 0, failed: row?.failed ?? 0 });
    }
    return buckets;
  }
}

function toRecord(row: JobRow): JobRecord {
  return {
    id: row.id,
    queue: row.queue,
    kind: row.kind,
    payload: row.payload,
    status: row.status,
    priority: row.priority,
    runAt: row.run_at,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    lockedAt: row.locked_at,
    lockedBy: row.locked_by,
    leaseSeq: row.lease_seq,
    lastError: row.last_error,
    createdAt: row.created_at,
    finishedAt: row.finished_at,
  };
}
