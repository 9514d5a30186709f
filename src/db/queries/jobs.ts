/**
 * Every statement on the jobs table, one function each, named noun-first. The
 * schema is quoted once when the statements are built; every value is a bind
 * parameter; every state change of a running job is guarded by its lease
 * (`status = 'running'`, the attempt it claimed, and the worker that claimed it).
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { JobRecord, JobStatus } from '../../job/job.js';
import { type Queryable, type QueryResultLike, run, runPrepared, type Statement } from '../executor.js';
import { channelName, quoteIdent } from '../sql.js';

/** A job row as selected (snake_case, as PostgreSQL returns it). */
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

/**
 * The lease fence of every result, heartbeat and release: rows `r` ($1 ids,
 * $2 attempts, $3 lease numbers) held by worker $4, still running. The
 * `id = ANY($1)` lets the planner go through the primary key.
 */
const LEASE_FENCE = `WHERE j.id = ANY($1::bigint[]) AND j.id = r.id AND j.attempts = r.attempts
             AND j.lease_seq = r.lease_seq AND j.status = 'running' AND j.locked_by = $4`;

const JOB_COLUMNS =
  'id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, locked_at, locked_by, lease_seq, last_error, created_at, finished_at';

/** Maps a selected row to the camelCase record; the one place this mapping happens. */
export function toJobRecord(row: JobRow): JobRecord {
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
    createdAt: row.created_at,
    lockedAt: row.locked_at,
    lockedBy: row.locked_by,
    leaseSeq: row.lease_seq,
    lastError: row.last_error,
    finishedAt: row.finished_at,
  };
}

/** One job to insert, already validated and serialised. */
export interface NewJob {
  kind: string;
  queue: string;
  payloadJson: string;
  priority: number;
  runAt: Date | null;
  delayMs: number | null;
  maxAttempts: number;
}

/**
 * A lease: the job, the attempt it claimed, and the claim's never-repeating
 * number. Every result, heartbeat and release is fenced by all three (and the
 * worker id), so a lease that was reclaimed — even one whose attempt number
 * came round again after a requeue — changes nothing.
 */
export interface LeasedJob {
  id: string;
  attempts: number;
  leaseSeq: string;
}

/** A failure to record: the error text and whether it is permanent (no retry). */
export interface FailedJob extends LeasedJob {
  error: string;
  permanent: boolean;
}

/** What `fail` wrote for one job. */
export interface FailureOutcome extends LeasedJob {
  status: 'queued' | 'failed' | 'dead';
  queue: string;
  /** Milliseconds until the retry is due (0 unless requeued with backoff). */
  retryDelayMs: number;
}

/** Filter of `requeue` and `list`; every field optional, all given fields must match. */
export interface JobFilter {
  ids?: string[];
  status?: JobStatus[];
  kind?: string[];
  queue?: string[];
}

/** Per queue and status: counts and the age of the oldest due job. */
export interface QueueStatsRow {
  queue: string;
  status: JobStatus;
  count: number;
  /** Milliseconds since the oldest due queued job's run_at; null for other statuses or when none is due. */
  oldestQueuedAgeMs: number | null;
}

/**
 * The statements of one schema. Built once per Skiplock; holds no connection.
 */
/**
 * Prepared (named) statements are for the claim, which is planned the same way
 * for any input. The result statements join an `unnest` of the batch: they are
 * sent unnamed so PostgreSQL plans each with the batch's real size — a generic
 * plan rescans the unnest per row, quadratic in the batch.
 */
export class JobQueries {
  readonly #s: string;
  readonly #statements: Record<string, Statement>;
  readonly channel: string;

  constructor(schema: string) {
    const s = quoteIdent(schema);
    this.#s = s;
    this.channel = channelName(schema);
    const t = `${s}.jobs`;
    // Prepared statement names are per connection; the schema makes them unique
    // when several schemas share a pool.
    const prefix = `skiplock_${createHash('sha256').update(schema).digest('hex').slice(0, 16)}_`;
    const statement = (name: string, text: string): Statement => ({ name: prefix + name, text });
    this.#statements = {
      insertOne: statement(
        'insert_one',
        `INSERT INTO ${t} (kind, queue, payload, priority, run_at, max_attempts)
         VALUES ($1, $2, $3::jsonb, $4,
                 COALESCE($5::timestamptz, now() + COALESCE($6::float8, 0) * interval '1 millisecond'), $7)
         RETURNING ${JOB_COLUMNS}`,
      ),
      insertMany: statement(
        'insert_many',
        `INSERT INTO ${t} (kind, queue, payload, priority, run_at, max_attempts)
         SELECT r.kind, r.queue, r.payload, r.priority,
                COALESCE(r.run_at, now() + COALESCE(r.delay_ms, 0) * interval '1 millisecond'), r.max_attempts
         FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::int[], $5::timestamptz[], $6::float8[], $7::int[])
              WITH ORDINALITY AS r(kind, queue, payload, priority, run_at, delay_ms, max_attempts, ord)
         ORDER BY r.ord
         RETURNING ${JOB_COLUMNS}`,
      ),
      // The guide's claim: one statement, SKIP LOCKED, priority then age. The
      // update finds its rows by primary key (= ANY): joining the CTE instead lets
      // a generic plan, which guesses LIMIT $2 at 10% of the table, hash the whole table.
      claim: statement(
        'claim',
        `WITH picked AS (
           SELECT id FROM ${t}
           WHERE status = 'queued' AND queue = $1 AND run_at <= now()
           ORDER BY priority DESC, run_at
           LIMIT $2
           FOR UPDATE SKIP LOCKED
         )
         UPDATE ${t} j
         SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
             locked_by = $3, visibility_timeout_ms = $4
         WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
         RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts, j.lease_seq, j.created_at`,
      ),
      // Several queues: the same claim over any of them (two shapes, two statements).
      claimAny: statement(
        'claim_any',
        `WITH picked AS (
           SELECT id FROM ${t}
           WHERE status = 'queued' AND queue = ANY($1::text[]) AND run_at <= now()
           ORDER BY priority DESC, run_at
           LIMIT $2
           FOR UPDATE SKIP LOCKED
         )
         UPDATE ${t} j
         SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
             locked_by = $3, visibility_timeout_ms = $4
         WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
         RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts, j.lease_seq, j.created_at`,
      ),
      completeDelete: statement(
        'complete_delete',
        `DELETE FROM ${t} j
         USING unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
         ${LEASE_FENCE}
         RETURNING j.id, j.attempts, j.lease_seq`,
      ),
      completeKeep: statement(
        'complete_keep',
        `UPDATE ${t} j
         SET status = 'succeeded', locked_at = NULL, locked_by = NULL, finished_at = now()
         FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
         ${LEASE_FENCE}
         RETURNING j.id, j.attempts, j.lease_seq`,
      ),
      completeArchive: statement(
        'complete_archive',
        `WITH done AS (
           DELETE FROM ${t} j
           USING unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
           ${LEASE_FENCE}
           RETURNING j.*
         )
         INSERT INTO ${s}.jobs_archive
           (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
            locked_at, last_error, created_at, locked_by, lease_seq, visibility_timeout_ms, finished_at)
         SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts, max_attempts,
                NULL, last_error, created_at, NULL, lease_seq, visibility_timeout_ms, now()
         FROM done
         RETURNING id, attempts, lease_seq`,
      ),
      // The guide's failure rule: backoff with jitter on the database clock, dead
      // letter after max_attempts, 'failed' for a permanent error. The exponent
      // is clamped at BACKOFF_MAX_EXPONENT (job/backoff.ts) so power() stays finite.
      fail: statement(
        'fail',
        `UPDATE ${t} j
         SET status = CASE WHEN r.permanent THEN 'failed'
                           WHEN j.attempts >= j.max_attempts THEN 'dead'
                           ELSE 'queued' END,
             locked_at = NULL, locked_by = NULL, last_error = r.error,
             run_at = CASE WHEN r.permanent OR j.attempts >= j.max_attempts THEN j.run_at
                           ELSE now() + least(interval '1 second' * power(2, least(j.attempts, 12)),
                                              interval '1 hour') * (0.5 + random() * 0.5) END,
             finished_at = CASE WHEN r.permanent OR j.attempts >= j.max_attempts THEN now() END
         FROM unnest($1::bigint[], $2::int[], $3::bigint[], $5::text[], $6::bool[])
              AS r(id, attempts, lease_seq, error, permanent)
         ${LEASE_FENCE}
         RETURNING j.id, j.attempts, j.lease_seq, j.status, j.queue,
                   GREATEST(0, EXTRACT(EPOCH FROM j.run_at - now()) * 1000)::float8 AS retry_delay_ms`,
      ),
      heartbeat: statement(
        'heartbeat',
        `UPDATE ${t} j SET locked_at = now()
         FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
         ${LEASE_FENCE}
         RETURNING j.id, j.attempts, j.lease_seq`,
      ),
      // Graceful shutdown gives jobs back without charging the attempt, and
      // wakes other workers for them.
      release: statement(
        'release',
        `WITH released AS (
           UPDATE ${t} j
           SET status = 'queued', locked_at = NULL, locked_by = NULL, attempts = j.attempts - 1, run_at = now()
           FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS r(id, attempts, lease_seq)
           ${LEASE_FENCE}
           RETURNING j.id, j.attempts + 1 AS attempts, j.lease_seq, j.queue
         ), notified AS (
           SELECT pg_catalog.pg_notify($5, pg_catalog.json_build_object('queue', q.queue, 'delayMs', 0)::text)
           FROM (SELECT DISTINCT queue FROM released WHERE pg_catalog.octet_length(queue) <= 1024) q
         )
         SELECT r.id, r.attempts, r.lease_seq, (SELECT count(*) FROM notified) AS notified FROM released r`,
      ),
      // The guide's sweeper, per job's own visibility timeout; a job out of
      // attempts goes to the dead letter instead of looping.
      sweep: statement(
        'sweep',
        `WITH expired AS (
           SELECT id FROM ${t}
           WHERE status = 'running'
             AND locked_at < now() - COALESCE(visibility_timeout_ms, $1) * interval '1 millisecond'
           ORDER BY locked_at
           LIMIT $2
           FOR UPDATE SKIP LOCKED
         ), swept AS (
           UPDATE ${t} j
           SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'queued' END,
               locked_at = NULL, locked_by = NULL, last_error = 'reclaimed: visibility timeout',
               finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
           WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
           RETURNING j.id, j.queue, j.status
         ), notified AS (
           SELECT pg_catalog.pg_notify($3, pg_catalog.json_build_object('queue', q.queue, 'delayMs', 0)::text)
           FROM (SELECT DISTINCT queue FROM swept WHERE status = 'queued' AND pg_catalog.octet_length(queue) <= 1024) q
         )
         SELECT s.id, s.status, (SELECT count(*) FROM notified) AS notified FROM swept s`,
      ),
      requeue: statement(
        'requeue',
        `WITH requeued AS (
           UPDATE ${t}
           SET status = 'queued', attempts = 0, run_at = now(), last_error = NULL, finished_at = NULL
           WHERE status IN ('dead', 'failed')
             AND status = ANY(COALESCE($1::text[], ARRAY['dead', 'failed']))
             AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
             AND ($3::text[] IS NULL OR kind = ANY($3::text[]))
             AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
           RETURNING queue
         ), notified AS (
           SELECT pg_catalog.pg_notify($5, pg_catalog.json_build_object('queue', q.queue, 'delayMs', 0)::text)
           FROM (SELECT DISTINCT queue FROM requeued WHERE pg_catalog.octet_length(queue) <= 1024) q
         )
         SELECT (SELECT count(*) FROM requeued)::int AS requeued, (SELECT count(*) FROM notified) AS notified`,
      ),
      getById: statement('get_by_id', `SELECT ${JOB_COLUMNS} FROM ${t} WHERE id = $1`),
      list: statement(
        'list',
        `SELECT ${JOB_COLUMNS} FROM ${t}
         WHERE ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
           AND ($2::text[] IS NULL OR status = ANY($2::text[]))
           AND ($3::text[] IS NULL OR kind = ANY($3::text[]))
           AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
         ORDER BY id
         LIMIT $5`,
      ),
      stats: statement(
        'stats',
        `SELECT queue, status, count(*)::int AS count,
                (EXTRACT(EPOCH FROM now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())) * 1000)::float8
                  AS oldest_queued_age_ms
         FROM ${t}
         GROUP BY queue, status
         ORDER BY queue, status`,
      ),
    };
  }

  #get(name: string): Statement {
    return this.#statements[name]!;
  }

  /** Inserts one job (SPEC §4); on the caller's connection when given. */
  async insertOne(db: Queryable, job: NewJob): Promise<JobRecord> {
    const { rows } = await run<JobRow>(db, this.#get('insertOne'), [
      job.kind,
      job.queue,
      job.payloadJson,
      job.priority,
      job.runAt,
      job.delayMs,
      job.maxAttempts,
    ]);
    return toJobRecord(rows[0]!);
  }

  /** Inserts many jobs in one statement; returns them in input order. */
  async insertMany(db: Queryable, jobs: NewJob[]): Promise<JobRecord[]> {
    const { rows } = await run<JobRow>(db, this.#get('insertMany'), [
      jobs.map((j) => j.kind),
      jobs.map((j) => j.queue),
      jobs.map((j) => j.payloadJson),
      jobs.map((j) => j.priority),
      jobs.map((j) => j.runAt),
      jobs.map((j) => j.delayMs),
      jobs.map((j) => j.maxAttempts),
    ]);
    // Identity values follow the ORDER BY of the insert, so id order is input order.
    return rows.map(toJobRecord).sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
  }

  /**
   * Claims up to `limit` due jobs of the given queues for `workerId`:
   * `queued → running`, attempts + 1, lease stamped (SPEC §3 "claim").
   */
  async claim(
    pool: pg.Pool,
    queues: readonly string[],
    limit: number,
    workerId: string,
    visibilityTimeoutMs: number,
  ): Promise<JobRecord[]> {
    const single = queues.length === 1;
    const { rows } = await runPrepared<JobRow>(pool, this.#get(single ? 'claim' : 'claimAny'), [
      single ? queues[0] : queues,
      limit,
      workerId,
      Math.round(visibilityTimeoutMs),
    ]);
    return rows.map((row) =>
      toJobRecord({
        ...row,
        status: 'running',
        locked_at: null,
        locked_by: workerId,
        last_error: null,
        finished_at: null,
      }),
    );
  }

  /**
   * Ends succeeded jobs by the success policy; returns the lease keys ({@link leaseKey})
   * whose lease still held (the others were reclaimed and are left untouched).
   */
  async complete(
    pool: pg.Pool,
    jobs: readonly LeasedJob[],
    workerId: string,
    policy: 'delete' | 'keep' | 'archive',
  ): Promise<Set<string>> {
    const name =
      policy === 'delete' ? 'completeDelete' : policy === 'keep' ? 'completeKeep' : 'completeArchive';
    const result = await run<{ id: string; lease_seq: string }>(pool, this.#get(name), [
      jobs.map((j) => j.id),
      jobs.map((j) => j.attempts),
      jobs.map((j) => j.leaseSeq),
      workerId,
    ]);
    return leaseKeys(result);
  }

  /** Records failures under the lease; returns what each job became. */
  async fail(pool: pg.Pool, jobs: readonly FailedJob[], workerId: string): Promise<FailureOutcome[]> {
    const { rows } = await run<{
      id: string;
      attempts: number;
      lease_seq: string;
      status: FailureOutcome['status'];
      queue: string;
      retry_delay_ms: number;
    }>(pool, this.#get('fail'), [
      jobs.map((j) => j.id),
      jobs.map((j) => j.attempts),
      jobs.map((j) => j.leaseSeq),
      workerId,
      jobs.map((j) => j.error),
      jobs.map((j) => j.permanent),
    ]);
    return rows.map((r) => ({
      id: r.id,
      attempts: r.attempts,
      leaseSeq: r.lease_seq,
      status: r.status,
      queue: r.queue,
      retryDelayMs: r.retry_delay_ms,
    }));
  }

  /** Refreshes `locked_at` of leased jobs; returns the lease keys ({@link leaseKey}) still held. */
  async heartbeat(pool: pg.Pool, jobs: readonly LeasedJob[], workerId: string): Promise<Set<string>> {
    const result = await run<{ id: string; lease_seq: string }>(pool, this.#get('heartbeat'), [
      jobs.map((j) => j.id),
      jobs.map((j) => j.attempts),
      jobs.map((j) => j.leaseSeq),
      workerId,
    ]);
    return leaseKeys(result);
  }

  /** Gives leased jobs back to `queued` without charging the attempt; returns the released lease keys. */
  async release(pool: pg.Pool, jobs: readonly LeasedJob[], workerId: string): Promise<Set<string>> {
    const result = await run<{ id: string; lease_seq: string }>(pool, this.#get('release'), [
      jobs.map((j) => j.id),
      jobs.map((j) => j.attempts),
      jobs.map((j) => j.leaseSeq),
      workerId,
      this.channel,
    ]);
    return leaseKeys(result);
  }

  /**
   * Reclaims up to `limit` jobs whose lease is older than their visibility
   * timeout (`defaultVisibilityTimeoutMs` for rows set running by plain SQL).
   * Run inside the sweeper's transaction, after it took the advisory lock.
   */
  async sweep(
    db: Queryable,
    defaultVisibilityTimeoutMs: number,
    limit: number,
  ): Promise<{ requeued: number; dead: number }> {
    const { rows } = await run<{ id: string; status: string }>(db, this.#get('sweep'), [
      Math.round(defaultVisibilityTimeoutMs),
      limit,
      this.channel,
    ]);
    const dead = rows.filter((r) => r.status === 'dead').length;
    return { requeued: rows.length - dead, dead };
  }

  /** Puts dead/failed jobs back to queued (attempts 0, run_at now, last_error null). */
  async requeue(db: Queryable, filter: JobFilter): Promise<number> {
    const { rows } = await run<{ requeued: number }>(db, this.#get('requeue'), [
      filter.status ?? null,
      filter.ids ?? null,
      filter.kind ?? null,
      filter.queue ?? null,
      this.channel,
    ]);
    return rows[0]?.requeued ?? 0;
  }

  /** One job by id, or undefined. */
  async getById(db: Queryable, id: string): Promise<JobRecord | undefined> {
    const { rows } = await run<JobRow>(db, this.#get('getById'), [id]);
    return rows[0] ? toJobRecord(rows[0]) : undefined;
  }

  /** Jobs matching the filter, oldest id first. */
  async list(db: Queryable, filter: JobFilter, limit: number): Promise<JobRecord[]> {
    const { rows } = await run<JobRow>(db, this.#get('list'), [
      filter.ids ?? null,
      filter.status ?? null,
      filter.kind ?? null,
      filter.queue ?? null,
      limit,
    ]);
    return rows.map(toJobRecord);
  }

  /** Counts per queue and status, and the oldest due queued job's age. */
  async stats(db: Queryable): Promise<QueueStatsRow[]> {
    const { rows } = await run<{
      queue: string;
      status: JobStatus;
      count: number;
      oldest_queued_age_ms: number | null;
    }>(db, this.#get('stats'), []);
    return rows.map((r) => ({
      queue: r.queue,
      status: r.status,
      count: r.count,
      oldestQueuedAgeMs: r.oldest_queued_age_ms,
    }));
  }

  /** The quoted schema, for statements outside this table's concern (migrations). */
  get quotedSchema(): string {
    return this.#s;
  }
}

/** Identifies one lease of a job: `id#leaseSeq` (never repeats). */
export function leaseKey(job: Pick<LeasedJob, 'id' | 'leaseSeq'>): string {
  return `${job.id}#${job.leaseSeq}`;
}

function leaseKeys(result: QueryResultLike<{ id: string; lease_seq: string }>): Set<string> {
  return new Set(result.rows.map((r) => leaseKey({ id: r.id, leaseSeq: r.lease_seq })));
}
