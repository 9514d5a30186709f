/**
 * The dashboard's own statements, for what the Skiplock API does not offer:
 * one job from the archive, delete by id, finished jobs per minute, the running
 * jobs of grouped queues by key, which jobs
 * still wait for their kind's `maxAttempts`, and which job ids are still
 * stored. Every value is a bind parameter; the schema is the only identifier
 * that varies, and it is quoted once here.
 */
import type pg from 'pg';
import { JOB_COLUMNS, type JobRow, toJobRecord } from '../db/queries/job-row.js';
import { quoteIdent } from '../db/sql.js';
import type { JobRecord } from '../job/job.js';
import { toLogLines } from '../workflow/job-output.js';

/** Finished jobs of one minute of the last hour. */
export interface ThroughputBucket {
  /** Whole minutes before now: 0 is the current minute, 59 the oldest. */
  minutesAgo: number;
  /** Succeeded jobs kept in the table or archived (deleted ones leave no row). */
  succeeded: number;
  /** Jobs that ended `failed` or `dead`. */
  failed: number;
}

/** The running jobs of a grouped queue, by group key. */
export interface GroupLoad {
  /** Keys with at least one running job. */
  keysRunning: number;
  /** The keys with the most running jobs, most first (ties by key), at most {@link BUSIEST_KEYS}. */
  busiest: { key: string; running: number }[];
}

/** Keys the queues page lists per grouped queue. */
export const BUSIEST_KEYS = 5;

/** The dashboard's statements on one schema. */
export class DashboardQueries {
  readonly #archived: string;
  readonly #delete: string;
  readonly #throughput: string;
  readonly #kindDecides: string;
  readonly #stored: string;
  readonly #groupLoad: string;

  constructor(schema: string) {
    const s = quoteIdent(schema);
    this.#archived = `SELECT ${JOB_COLUMNS}, result, progress, logs FROM ${s}.jobs_archive WHERE id = $1`;
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
    // Reads only running rows with a key, through the partial index of the
    // grouped claim's running counts: as many rows as jobs running.
    this.#groupLoad = `SELECT queue, group_key, running, keys FROM (
        SELECT queue, group_key, running,
               count(*) OVER (PARTITION BY queue)::int AS keys,
               row_number() OVER (PARTITION BY queue ORDER BY running DESC, group_key) AS rank
        FROM (SELECT queue, group_key, count(*)::int AS running FROM ${s}.jobs
              WHERE queue = ANY($1::text[]) AND status = 'running' AND group_key IS NOT NULL
              GROUP BY queue, group_key) per_key) ranked
      WHERE rank <= $2
      ORDER BY queue, rank`;
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
    const { rows } = await pool.query<JobRow & { result: unknown; progress: unknown; logs: unknown }>(
      this.#archived,
      [id],
    );
    const row = rows[0];
    if (!row) return undefined;
    return { ...toJobRecord(row), result: row.result, progress: row.progress, logs: toLogLines(row.logs) };
  }

  /** Deletes a job that is not running. @returns whether a row was deleted. */
  async deleteJob(pool: pg.Pool, id: string): Promise<boolean> {
    const { rowCount } = await pool.query(this.#delete, [id]);
    return rowCount === 1;
  }

  /** For each of `queues`, its keys with running jobs and the busiest of them; a queue with none is absent. */
  async groupLoad(pool: pg.Pool, queues: readonly string[]): Promise<Map<string, GroupLoad>> {
    const load = new Map<string, GroupLoad>();
    if (queues.length === 0) return load;
    const { rows } = await pool.query<{ queue: string; group_key: string; running: number; keys: number }>(
      this.#groupLoad,
      [queues, BUSIEST_KEYS],
    );
    for (const row of rows) {
      const entry = load.get(row.queue) ?? { keysRunning: row.keys, busiest: [] };
      entry.busiest.push({ key: row.group_key, running: row.running });
      load.set(row.queue, entry);
    }
    return load;
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
