/**
 * Dependencies between jobs: inserting a job with parents (dependsOn), and
 * reading a job's parents and children, and applying the success policy of
 * parents kept for their children. The release of children when their
 * parents end is not here: it is done by the jobs table's triggers
 * (migration 15), in the transaction of whatever statement ends a parent.
 */

import { DatabaseError } from '../../errors.js';
import type { JobLink, JobRecord, JobStatus } from '../../job/job.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { jobColumnValues, type NewJob } from './insert.js';
import { ARCHIVE_COLUMNS, ARCHIVE_RESULT_COLUMNS, JOB_COLUMNS, type JobRow, toJobRecord } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** What a parent ending failed, dead or cancelled does to a waiting child. */
export type OnParentFailure = 'cancel' | 'run';

/** One parent of a job, as the child's handler reads it. */
export interface ParentJob {
  id: string;
  kind: string;
  /** What the parent ended as; `waiting`, `queued` or `running` while it has not ended. */
  status: JobStatus;
  /** The parent's result; null until the parent stored one. */
  result: unknown;
}

/** A parent named in `dependsOn` does not exist (in the jobs table nor the archive). */
export class UnknownParentError extends Error {
  readonly parentId: string;
  constructor(parentId: string) {
    super(`no job ${parentId}`);
    this.parentId = parentId;
  }
}

/** The dependency statements of one schema. */
export class DependencyQueries {
  readonly #insert: Statement;
  readonly #parents: Statement;
  readonly #edges: Statement;
  readonly #lockKept: Statement;
  readonly #settleKept: Statement;

  constructor(names: SchemaNames) {
    const { jobs, quoted } = names;
    // jobs_prepare_child takes the id, locks and marks the parents and writes
    // the edges, all in this statement: an unknown parent raises P0002 and
    // nothing stays. The child's status comes from it (waiting, queued or
    // cancelled). Parameters as the extended single insert, then $12 parent
    // ids, $13 the failure policy, $14 the group key and $15 the
    // job's own success policy.
    this.#insert = names.statement(
      'insert_child',
      `WITH c AS (SELECT * FROM ${quoted}.jobs_prepare_child($12::bigint[], $13::text))
       INSERT INTO ${jobs} (id, kind, queue, payload, priority, run_at, max_attempts, max_attempts_default,
                            trace_context, tags, start_by, status, pending_parents, on_parent_failure,
                            last_error, finished_at, group_key, on_success)
       OVERRIDING SYSTEM VALUE
       SELECT c.child_id, $1, $2, $3::text::jsonb, $4,
              COALESCE($5::timestamptz, now() + COALESCE($6::float8, 0) * interval '1 millisecond'),
              COALESCE($7::int, 20), $7::int IS NULL, $8::text::jsonb, $9::text[],
              COALESCE($10::timestamptz, now() + $11::float8 * interval '1 millisecond'),
              c.status, c.pending_parents, $13::text, c.last_error,
              CASE WHEN c.status = 'cancelled' THEN now() END, $14::text, $15::text
       FROM c
       RETURNING ${JOB_COLUMNS}`,
    );
    // A parent not ended reads its live status; an ended one what its edge recorded.
    this.#parents = names.statement(
      'job_parents',
      `SELECT d.parent_id AS id, d.parent_kind AS kind,
              COALESCE(d.parent_status, p.status, 'cancelled') AS status, d.parent_result AS result
       FROM ${quoted}.job_dependencies d LEFT JOIN ${jobs} p ON p.id = d.parent_id
       WHERE d.child_id = $1::bigint
       ORDER BY d.parent_id`,
    );
    this.#edges = names.statement(
      'job_edges',
      `SELECT 'parent' AS side, d.parent_id AS id, d.parent_kind AS kind, COALESCE(p.status, d.parent_status) AS status
       FROM ${quoted}.job_dependencies d LEFT JOIN ${jobs} p ON p.id = d.parent_id
       WHERE d.child_id = $1::bigint
       UNION ALL
       SELECT 'child', d.child_id, c.kind, c.status
       FROM ${quoted}.job_dependencies d JOIN ${jobs} c ON c.id = d.child_id
       WHERE d.parent_id = $1::bigint
       ORDER BY 1, 2`,
    );
    // A job that succeeded with children under 'delete' or 'archive' stays
    // `succeeded`, on_success naming the policy (see the finish statement);
    // jobs_kept_parents_idx holds exactly these rows.
    this.#lockKept = names.statement(
      'kept_parents_lock',
      `SELECT id FROM ${jobs}
       WHERE status = 'succeeded' AND has_children AND on_success IN ('delete', 'archive')
       ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
    );
    // Run after the lock, so on a snapshot that sees every child whose enqueue
    // committed before the lock was granted; an enqueue not yet committed then
    // held the parent's row (it locks it before writing its edge) and was
    // skipped, and one that comes now waits for this transaction and finds
    // the parent archived or gone.
    const columns = `${ARCHIVE_COLUMNS}, ${ARCHIVE_RESULT_COLUMNS}`;
    this.#settleKept = names.statement(
      'kept_parents_settle',
      `WITH settled AS (
         DELETE FROM ${jobs} p
         WHERE p.id = ANY($1::bigint[]) AND p.status = 'succeeded' AND p.on_success IN ('delete', 'archive')
           AND NOT EXISTS (SELECT 1 FROM ${quoted}.job_dependencies d JOIN ${jobs} c ON c.id = d.child_id
                           WHERE d.parent_id = p.id AND c.status IN ('waiting', 'queued'))
         RETURNING p.*
       ), archived AS (
         INSERT INTO ${names.archive} (${columns})
         SELECT ${columns} FROM settled WHERE on_success = 'archive'
         RETURNING 1
       )
       SELECT (SELECT count(*) FROM settled)::int AS settled, (SELECT count(*) FROM archived)::int AS archived`,
    );
  }

  /**
   * Applies the success policy of at most `limit` parents kept for their
   * children (they succeeded under 'delete' or 'archive' while some child had
   * not started): deletes, or moves to the archive, those none of whose
   * children is `waiting` or `queued` any more. Parents locked elsewhere (a
   * child's enqueue in progress) are left for the next call. Two statements:
   * run it in a transaction (the maintenance loop's).
   *
   * @returns how many parents were locked (`locked`; fewer than `limit`: none
   *   left), and of those how many were deleted or archived (`settled`), and
   *   archived (`archived`).
   * @throws {DatabaseError} from the database.
   */
  async settleKeptParents(
    db: Queryable,
    limit: number,
  ): Promise<{ locked: number; settled: number; archived: number }> {
    const locked = (await run<{ id: string }>(db, this.#lockKept, [limit])).rows.map((r) => r.id);
    if (locked.length === 0) return { locked: 0, settled: 0, archived: 0 };
    const { rows } = await run<{ settled: number; archived: number }>(db, this.#settleKept, [locked]);
    return { locked: locked.length, settled: rows[0]?.settled ?? 0, archived: rows[0]?.archived ?? 0 };
  }

  /**
   * Inserts `job` with `parentIds` as its parents (see jobs_prepare_child in
   * migration 15 for the status it starts with). Run it in the transaction
   * that inserts the parents, or after they committed.
   *
   * @throws {UnknownParentError} when a parent is in neither the jobs table nor the archive; nothing is inserted.
   * @throws {DatabaseError} from the database.
   */
  async insertChild(
    db: Queryable,
    job: NewJob,
    parentIds: readonly string[],
    onParentFailure: OnParentFailure,
  ): Promise<JobRecord> {
    try {
      const { rows } = await run<JobRow>(db, this.#insert, [
        ...jobColumnValues(job),
        job.traceContext ?? null,
        job.tags ?? null,
        job.startBy ?? null,
        job.startWithinMs ?? null,
        parentIds,
        onParentFailure,
        job.groupKey ?? null,
        job.onSuccess ?? null,
      ]);
      return toJobRecord(rows[0]!);
    } catch (error) {
      if (error instanceof DatabaseError && error.sqlState === 'P0002') {
        const id = /no job (\d+)/.exec(error.message)?.[1];
        if (id !== undefined) throw new UnknownParentError(id);
      }
      throw error;
    }
  }

  /** The parents of job `childId`, by id; empty for a job enqueued without dependsOn. */
  async parents(db: Queryable, childId: string): Promise<ParentJob[]> {
    const { rows } = await run<ParentJob>(db, this.#parents, [childId]);
    return rows;
  }

  /** The parents and children of job `id`, each by id. */
  async edges(db: Queryable, id: string): Promise<{ dependsOn: JobLink[]; children: JobLink[] }> {
    const { rows } = await run<JobLink & { side: 'parent' | 'child' }>(db, this.#edges, [id]);
    const edge = ({ id, kind, status }: JobLink) => ({ id, kind, status });
    return {
      dependsOn: rows.filter((r) => r.side === 'parent').map(edge),
      children: rows.filter((r) => r.side === 'child').map(edge),
    };
  }
}
