/**
 * The jobs table as rows: the columns selected, the one mapping from snake_case
 * rows to records, and the lease a result is fenced by.
 */
import { toAttemptErrors } from '../../job/attempt-history.js';
import type { JobRecord, JobStatus, JobSummary } from '../../job/job.js';
import { type Queryable, run, type Statement } from '../executor.js';

/** A job row as selected (snake_case, as PostgreSQL returns it). */
export interface JobRow {
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
  cancel_requested_at: Date | null;
  /** The failed attempts' JSON array; null until the first failure. */
  errors: unknown;
  tags: string[] | null;
  start_by: Date | null;
  group_key: string | null;
}

/** Every column of {@link JobRow} but the payload, in one select list (list views read a preview of it). */
export const JOB_COLUMNS_BUT_PAYLOAD =
  'id, queue, kind, status, priority, run_at, attempts, max_attempts, locked_at, locked_by, lease_seq, last_error, created_at, finished_at, cancel_requested_at, errors, tags, start_by, group_key';

/** Every column of {@link JobRow}, in one select list. */
export const JOB_COLUMNS = `${JOB_COLUMNS_BUT_PAYLOAD}, payload`;

/** The archive's columns that every move to the archive writes. */
export const ARCHIVE_COLUMNS =
  'id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, locked_at, last_error, created_at, locked_by, lease_seq, visibility_timeout_ms, finished_at, max_attempts_default, errors, trace_context, tags, start_by, group_key';

/** The archive's columns a move writes when the job stored a result. */
export const ARCHIVE_RESULT_COLUMNS = 'result, on_success, progress, logs';

/** A row of a list view: the payload's preview instead of the payload. */
export interface JobSummaryRow extends Omit<JobRow, 'payload'> {
  payload_preview: string;
  payload_truncated: boolean;
}

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
    cancelRequestedAt: row.cancel_requested_at,
    errors: toAttemptErrors(row.errors),
    tags: row.tags ?? [],
    startBy: row.start_by,
    groupKey: row.group_key,
  };
}

/** Maps a list view's row to its camelCase summary. */
export function toJobSummary(row: JobSummaryRow): JobSummary {
  const { payload_preview, payload_truncated, ...rest } = row;
  const { payload: _, ...record } = toJobRecord({ ...rest, payload: null });
  return { ...record, payloadPreview: payload_preview, payloadTruncated: payload_truncated };
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

/**
 * Where a row's job stands in the batch arrays ($1 ids, and any per-job array
 * after the fence's parameters): `($n::type[])[AT]`. A lookup by position is
 * linear in the batch, so only statements that need per-job values use it
 * (releases, and the finish statement's failures and snoozes); the fence
 * itself does not. A batch holds each job id once: see
 * {@link newestLeasePerJob}.
 */
export const AT = 'array_position($1::bigint[], j.id)';

/**
 * The lease fence of every result, heartbeat and release: rows of the batch's
 * jobs ($1 ids) held by worker $3, still running, whose lease key — id,
 * attempt and lease number, see {@link leaseFenceKey} — is one of the batch's
 * ($2). The rows are found through the primary key; the key test is one hashed
 * lookup per row (PostgreSQL hashes `= ANY` of a constant array), so the fence
 * costs O(n) in the batch. A join of the batch with the table is avoided: a plan
 * built on stale statistics may rescan the batch for every row. The ids are
 * read as a subquery's array, whose length the planner does not see: given a
 * constant array of a batch's hundreds of ids, it judged as many primary-key
 * lookups dearer than reading the whole table, and a table of 50,000 jobs was
 * read through for each batch (a finish of 1,000 took 7 ms instead of 3).
 */
export const LEASE_FENCE = leaseFence('$1::bigint[]', '$2::text[]', '$3');

/**
 * {@link LEASE_FENCE} over other parameters: the rows of jobs `ids` held by
 * worker `workerId`, still running, whose lease key is one of `keys` (each a
 * parameter reference with its type, e.g. `$4::bigint[]`).
 */
export function leaseFence(ids: string, keys: string, workerId: string): string {
  return `WHERE j.id = ANY(ARRAY(SELECT unnest(${ids}))) AND j.status = 'running' AND j.locked_by = ${workerId}
             AND (j.id::text || '/' || j.attempts::text || '/' || j.lease_seq::text) = ANY(${keys})`;
}

/** The key {@link LEASE_FENCE} compares: `id/attempts/leaseSeq`, as PostgreSQL prints the row's. */
export function leaseFenceKey(job: LeasedJob): string {
  return `${job.id}/${job.attempts}/${job.leaseSeq}`;
}

/**
 * The batch with one lease per job: where a worker holds two leases of a job
 * (a reclaimed one still finishing, and the job's next claim), the older one
 * cannot be the job's current lease, so it is left out (the fence would refuse
 * it anyway); the statements read their batch by job id.
 */
export function newestLeasePerJob<T extends LeasedJob>(jobs: readonly T[]): readonly T[] {
  const byId = new Map<string, T>();
  for (const job of jobs) {
    const other = byId.get(job.id);
    if (!other || BigInt(job.leaseSeq) > BigInt(other.leaseSeq)) byId.set(job.id, job);
  }
  return byId.size === jobs.length ? jobs : [...byId.values()];
}

/**
 * The ids and lease keys of `jobs` (see {@link leaseFenceKey}), as the fence
 * reads them: each as the text of a PostgreSQL array (`{1,2}`, `{1/1/1,2/1/1}`).
 * Written here rather than by the driver, which quotes and escapes every
 * element of an array parameter: these hold only digits and slashes (ids and
 * lease numbers come from the database), which an array literal takes as
 * they are, and a finish of hundreds of jobs is sent many times a second.
 */
export function leaseFenceArrays(jobs: readonly LeasedJob[]): [string, string] {
  let ids = '{';
  let keys = '{';
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i]!;
    const separator = i === 0 ? '' : ',';
    ids += separator + job.id;
    keys += separator + leaseFenceKey(job);
  }
  return [`${ids}}`, `${keys}}`];
}

/** The first three parameters of every fenced statement: ids, lease keys, worker id. */
export function leaseParams(jobs: readonly LeasedJob[], workerId: string): unknown[] {
  return [...leaseFenceArrays(jobs), workerId];
}

/** Identifies one lease of a job: `id#leaseSeq` (never repeats). */
export function leaseKey(job: Pick<LeasedJob, 'id' | 'leaseSeq'>): string {
  return `${job.id}#${job.leaseSeq}`;
}

/**
 * Runs a lease-fenced statement (parameters: {@link leaseParams} alone) for the
 * held jobs; returns the lease keys of the rows it touched.
 *
 * @throws {DatabaseError} from the database.
 */
export async function runFenced(
  db: Queryable,
  statement: Statement,
  jobs: readonly LeasedJob[],
  workerId: string,
): Promise<Set<string>> {
  const { rows } = await run<{ id: string; lease_seq: string }>(
    db,
    statement,
    leaseParams(newestLeasePerJob(jobs), workerId),
  );
  return leaseKeys(rows);
}

/** The lease keys of rows a fenced statement returned. */
export function leaseKeys(rows: readonly { id: string; lease_seq: string }[]): Set<string> {
  const keys = new Set<string>();
  for (const r of rows) keys.add(`${r.id}#${r.lease_seq}`);
  return keys;
}
