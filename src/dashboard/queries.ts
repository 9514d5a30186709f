/**
 * The dashboard's own statements, for what the Skiplock API does not offer:
 * one job from the archive, delete by id, finished jobs per minute, which jobs
 * still wait for their kind's `maxAttempts`, and which job ids are still
 * stored. Every value is a bind parameter; the schema is the only identifier
 * that varies, and it is quoted once here.
 */
import type pg from 'pg';
import { JOB_COLUMNS, type JobRow, toJobRecord } from '../db/queries/job-row.js';
import { quoteIdent } from '../db/sql.js';
import type { JobRecord } from '../job/job.js';

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
  readonly #archived: string;
  readonly #delete: string;
  readonly #throughput: string;
  readonly #kindDecides: string;
  readonly #stored: string;

  constructor(schema: string) {
    const s = quoteIdent(schema);
    this.#archived = `SELECT ${JOB_COLUMNS} FROM ${s}.jobs_archive WHERE id = $1`;
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
    // Never claimed, max_attempts left out: the row's 20 is a placeholder
    // until a worker whose handler gives the kind a maxAttempts claims it.
    this.#kindDecides = `SELECT id::text AS id FROM ${s}.jobs
      WHERE id = ANY($1::bigint[]) AND max_attempts_default AND lease_seq = 0`;
    this.#stored = `SELECT id::text AS id FROM ${s}.jobs WHERE id = ANY($1::bigint[])
      UNION SELECT id::text FROM ${s}.jobs_archive WHERE id = ANY($1::bigint[])`;
  }

  /** Of `ids`, the jobs whose attempt limit their kind's handler sets at the first claim. */
  async kindDecidesMaxAttempts(pool: pg.Pool, ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const { rows } = await pool.query<{ id: string }>(this.#kindDecides, [ids]);
    return new Set(rows.map((r) => r.id));
  }

  /** Of `ids`, the jobs still in the jobs table or the archive. */
  async storedJobIds(pool: pg.Pool, ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const { rows } = await pool.query<{ id: string }>(this.#stored, [ids]);
    return new Set(rows.map((r) => r.id));
  }

  /** A job moved to `jobs_archive` on success, or undefined. */
  async getArchived(pool: pg.Pool, id: string): Promise<JobRecord | undefined> {
    const { rows } = await pool.query<JobRow>(this.#archived, [id]);
    return rows[0] ? toJobRecord(rows[0]) : undefined;
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
