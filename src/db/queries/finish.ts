/**
 * The finish family: one statement writes the results of a batch of
 * attempts — any mix of successes, failures and snoozes — fenced by each
 * job's lease (job id, attempt, lease number, worker id, `status = 'running'`).
 * What each row becomes:
 *
 * - `succeeded`: by the success policy, the row is deleted, kept as
 *   `succeeded`, or moved to the archive; a job with children is kept as
 *   `succeeded` under any policy, and the maintenance loop applies the policy
 *   once its children have started (see keptSql);
 * - `retry`: a failure with attempts left goes back to `queued` after the
 *   kind's delay, or the default backoff on the database clock;
 * - `failed`: a permanent failure, never retried;
 * - `dead`: a failure with `attempts >= max_attempts` (the database decides);
 * - `snoozed`: back to `queued` after the delay, the attempt not charged;
 * - `cancelled`: a job whose cancel was requested ends `cancelled` whatever
 *   its attempt returned, its attempt charged and no error recorded.
 *
 * A lease that was reclaimed changes nothing, and the rows not returned say
 * which. The statement text is generated, from the one definition below, for
 * the outcomes present in the batch (a batch of successes alone, the common
 * case, carries no per-job arrays), and sent unnamed so that PostgreSQL plans
 * it with the batch's values: the lease keys are then constant arrays it
 * hashes, and the fence stays linear in the batch.
 */
import { BACKOFF_MAX_EXPONENT } from '../../job/backoff.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { appendAttemptError } from './attempt-errors.js';
import {
  ARCHIVE_COLUMNS,
  ARCHIVE_RESULT_COLUMNS,
  AT,
  LEASE_FENCE,
  type LeasedJob,
  leaseFence,
  leaseFenceArrays,
  leaseKey,
  newestLeasePerJob,
} from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** What happens to a succeeded job's row. */
export type SuccessPolicy = 'delete' | 'keep' | 'archive';

/** How one attempt ended, as the finish statement takes it. */
export type AttemptResult =
  | {
      outcome: 'succeeded';
      /**
       * The handler's return value as JSON text: stored as `result` when the row
       * outlives the success, and for the job's children (`parents()`) in any case.
       */
      result?: string | undefined;
      /** The job's own success policy; undefined: the batch's. */
      onSuccess?: SuccessPolicy | undefined;
    }
  | {
      outcome: 'failed';
      /** The text stored in `last_error` and the attempt history. */
      error: string;
      /** Whether the job ends `failed` without retry. */
      permanent: boolean;
      /** Milliseconds until the retry, from the kind's backoff; undefined for the default rule. */
      retryDelayMs?: number | undefined;
    }
  | {
      outcome: 'snoozed';
      /** Milliseconds until the job is due again. */
      delayMs: number;
    }
  /**
   * The attempt's work was undone because its cancel was requested (a
   * transactional handler's rolled-back transaction): the job ends
   * `cancelled` when its cancel was requested, and nothing else is written.
   */
  | { outcome: 'cancelled' };

/** A held job and how its attempt ended. */
export type FinishingJob = LeasedJob & AttemptResult;

/** What the finish statement wrote for one job. */
export type FinishOutcome = 'succeeded' | 'retry' | 'snoozed' | 'failed' | 'dead' | 'cancelled';

/**
 * What the finish statement wrote for one job. A success comes without its
 * queue: the statement returns no row for the successes it wrote (only for
 * those it did not), as reading hundreds of rows back cost the worker more
 * than the rest of the write.
 */
export type FinishedJob =
  | { id: string; leaseSeq: string; outcome: 'succeeded'; retryDelayMs: 0 }
  | {
      id: string;
      leaseSeq: string;
      outcome: Exclude<FinishOutcome, 'succeeded'>;
      queue: string;
      /** Milliseconds until the job is due again (a retry or a snooze); 0 otherwise. */
      retryDelayMs: number;
    };

/** One success part: the policy of its jobs, and whether it stores their results. */
interface SuccessPart {
  policy: SuccessPolicy;
  results: boolean;
}

/** Which outcomes a batch holds: picks the statement of the family. */
interface Variant {
  /** The success parts, one per policy present (in the order delete, keep, archive). */
  success: SuccessPart[];
  failure: boolean;
  snooze: boolean;
  /** Each outcome's jobs come in arrays of their own; false when one outcome's jobs are the whole batch. */
  ownArrays: boolean;
}

/** The columns every part of the statement returns, in this order. */
const RETURNED = (outcome: string, retryDelayMs: string) =>
  `RETURNING j.id, j.lease_seq, ${outcome}::text AS outcome, j.queue, ${retryDelayMs}::float8 AS retry_delay_ms`;

/** Where the ended lease's row goes: unlocked, finished now. */
const ENDED = 'locked_at = NULL, locked_by = NULL, finished_at = now()';

/**
 * The statement for `variant`. Parameters: $1 ids, $2 lease keys (see
 * leaseFenceKey) and $3 worker id of the whole batch; then, for each outcome
 * present (successes, failures, snoozes, in that order), the ids and lease
 * keys of its jobs — left out when its jobs are the whole batch — and its
 * per-job values (successes that store results: the results as JSON text or
 * null; failures: error, permanent, retry delay or null; snoozes: delay), read
 * by the job's position in its ids. Successes come as one part per policy
 * present; a batch whose successes all follow the caller's policy and store no
 * result is the plain statement of that policy, with no per-job arrays.
 *
 * Writable CTEs on one table must not touch the same row (PostgreSQL applies
 * one of two such changes, unpredictably). Here a row is in at most one part:
 * the outcome parts take disjoint sets of job ids (the batch holds one lease
 * per job, and each job goes to the part of its one result), and the
 * cancelled part takes only the ids no outcome part returned. The outcome
 * parts also require `cancel_requested_at IS NULL` and the cancelled part the
 * opposite, all on one snapshot, so a job whose cancel was requested before
 * the statement ends `cancelled`. A cancel committed after the snapshot fails
 * an outcome part's recheck of the row, and the cancelled part's snapshot does
 * not see it: the row is left alone, and the caller reads its state and writes
 * it again.
 */
function finishSql(names: SchemaNames, variant: Variant): string {
  const { jobs } = names;
  let last = 3;
  const param = (type: string) => `$${++last}::${type}`;
  /** The fence of one outcome's jobs (their cancel not requested), and their position lookup. */
  const part = (): Part => {
    const ids = variant.ownArrays ? param('bigint[]') : '$1::bigint[]';
    const keys = variant.ownArrays ? param('text[]') : '$2::text[]';
    return {
      ids,
      fence: `${leaseFence(ids, keys, '$3')} AND j.cancel_requested_at IS NULL`,
      at: (array: string) => `(${array})[array_position(${ids}, j.id)]`,
    };
  };
  const ctes: string[] = [];
  /** The parts that write; each returns its rows' ids. */
  const selects: string[] = [];
  /** The parts whose rows the statement returns: all but the successes, which return the ids they did not write. */
  const returned: string[] = [];
  const oneSuccessPart = variant.success.length === 1;
  for (const { policy, results } of variant.success) {
    const p = part();
    const name = oneSuccessPart ? 'succeeded' : `succeeded_${policy}`;
    const resultArray = results ? param('text[]') : undefined;
    const written = successParts(names, policy, p, name, resultArray && `(${p.at(resultArray)})::jsonb`);
    ctes.push(
      ...written.ctes,
      `${name}_not AS (
       SELECT u.id, NULL::bigint AS lease_seq, 'unwritten'::text AS outcome, NULL::text AS queue,
              0::float8 AS retry_delay_ms
       FROM unnest(${unwrittenIds(p.ids, [name])}) AS u(id))`,
    );
    selects.push(name);
    // The caller takes every success not named here as written: this part must be returned.
    returned.push(`${name}_not`);
  }
  if (variant.failure) {
    const { fence, at } = part();
    const error = at(param('text[]'));
    const permanent = at(param('bool[]'));
    const delay = at(param('float8[]'));
    const ends = `${permanent} OR j.attempts >= j.max_attempts`;
    // Backoff with jitter on the database clock unless the kind gave a delay; the
    // exponent is clamped (BACKOFF_MAX_EXPONENT) so power() stays finite.
    ctes.push(`failed AS (
       UPDATE ${jobs} j
       SET status = CASE WHEN ${permanent} THEN 'failed' WHEN j.attempts >= j.max_attempts THEN 'dead'
                         ELSE 'queued' END,
           locked_at = NULL, locked_by = NULL, last_error = ${error},
           run_at = CASE WHEN ${ends} THEN j.run_at
                         ELSE now() + COALESCE(${delay} * interval '1 millisecond',
                                               least(interval '1 second'
                                                       * power(2, least(j.attempts, ${BACKOFF_MAX_EXPONENT})),
                                                     interval '1 hour') * (0.5 + random() * 0.5)) END,
           finished_at = CASE WHEN ${ends} THEN now() END,
           errors = ${appendAttemptError(error, '$3')}
       ${fence}
       ${RETURNED(
         "CASE WHEN j.status = 'queued' THEN 'retry' ELSE j.status END",
         'GREATEST(0, EXTRACT(EPOCH FROM j.run_at - now()) * 1000)',
       )})`);
    selects.push('failed');
    returned.push('failed');
  }
  if (variant.snooze) {
    const { fence, at } = part();
    const delay = at(param('float8[]'));
    ctes.push(`snoozed AS (
       UPDATE ${jobs} j
       SET status = 'queued', locked_at = NULL, locked_by = NULL, attempts = j.attempts - 1,
           run_at = now() + ${delay} * interval '1 millisecond'
       ${fence}
       ${RETURNED("'snoozed'", delay)})`);
    selects.push('snoozed');
    returned.push('snoozed');
  }
  const rest = selects.length === 0 ? '$1::bigint[]' : unwrittenIds('$1::bigint[]', selects);
  ctes.push(`cancelled AS (
       UPDATE ${jobs} j SET status = 'cancelled', ${ENDED}
       ${leaseFence(rest, '$2::text[]', '$3')} AND j.cancel_requested_at IS NOT NULL
       ${RETURNED("'cancelled'", '0')})`);
  returned.push('cancelled');
  return `WITH ${ctes.join(',\n')}
SELECT * FROM ${returned.join(' UNION ALL SELECT * FROM ')}`;
}

/** One outcome's jobs in the statement: their ids, their fence, and a per-job value by position. */
interface Part {
  /** The parameter holding the part's job ids. */
  ids: string;
  /** The WHERE clause taking the part's jobs whose lease holds and cancel was not requested. */
  fence: string;
  /** The element of `array` (a per-job parameter) for the row `j`. */
  at(array: string): string;
}

/**
 * Of `ids`, those that no part in `parts` returned (each part returns `id`).
 * When the parts returned every id (the common batch) it is empty, read
 * without a scan: a CASE evaluates its ELSE (the set difference) only when
 * reached.
 */
function unwrittenIds(ids: string, parts: readonly string[]): string {
  const written = parts.map((p) => `(SELECT count(*) FROM ${p})`).join(' + ');
  const unwritten = parts.map((p) => `SELECT id FROM ${p}`).join(' UNION ALL ');
  return `CASE WHEN ${written} = cardinality(${ids}) THEN '{}'::bigint[]
              ELSE ARRAY(SELECT unnest(${ids}) EXCEPT ALL (${unwritten})) END`;
}

/**
 * The parts that end succeeded jobs by `policy`, the last of them, `name`,
 * returning the ids it wrote; with `result` (the expression of the row `j`'s
 * result), they store each job's result where its row stays. Under 'delete'
 * and 'archive' they take only rows without children: see {@link keptSql}
 * for the others.
 */
function successParts(
  names: SchemaNames,
  policy: SuccessPolicy,
  part: Part,
  name: string,
  result: string | undefined,
): { ctes: string[] } {
  const { jobs } = names;
  const returned = 'RETURNING j.id';
  if (policy === 'keep') {
    const setResult = result ? `, result = ${result}` : '';
    return {
      ctes: [
        `${name} AS (UPDATE ${jobs} j SET status = 'succeeded', ${ENDED}${setResult} ${part.fence} ${returned})`,
      ],
    };
  }
  if (policy === 'delete') {
    return {
      ctes: [`${name} AS (DELETE FROM ${jobs} j ${part.fence} AND NOT j.has_children ${returned})`],
    };
  }
  const archived = name === 'succeeded' ? 'archived' : `archived_${policy}`;
  const extra = result ? `, ${ARCHIVE_RESULT_COLUMNS}` : '';
  return {
    ctes: [
      `${archived} AS (DELETE FROM ${jobs} j ${part.fence} AND NOT j.has_children RETURNING j.*)`,
      `${name} AS (
           INSERT INTO ${names.archive} AS j (${ARCHIVE_COLUMNS}${extra})
           SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts, max_attempts,
                  NULL, last_error, created_at, NULL, lease_seq, visibility_timeout_ms, now(),
                  max_attempts_default, errors, trace_context, tags, start_by, group_key${result ? `, ${result}, on_success, progress, logs` : ''}
           FROM ${archived}${result ? ' j' : ''}
           ${returned})`,
    ],
  };
}

/**
 * The statement that ends succeeded jobs with children under 'delete' or
 * 'archive' ($4, the policy): kept as `succeeded`, with their result ($5,
 * JSON text by position in $1, with `results`) and with `on_success` naming
 * the policy, which the maintenance loop applies once their children have
 * started. Sent after the finish statement, for the successes it did not
 * write (none in the usual batch), fenced by the lease like it.
 *
 * Under READ COMMITTED the race with a child's enqueue (which locks the
 * parent's row, marks it `has_children` and writes the edge, then commits)
 * goes one of these ways; in each the child reads the parent's end:
 *
 * - the enqueue committed before the finish statement's snapshot: its delete
 *   sees `has_children` and skips the row; this statement keeps it;
 * - the enqueue holds the row lock when the delete reaches the row: the
 *   delete waits, then re-checks its WHERE on the committed row, whose
 *   `has_children` is now true, and skips it (a rollback leaves the old row,
 *   deleted as usual); this statement, on a later snapshot, keeps it;
 * - the enqueue reaches the row after the finish did: it waits for that
 *   transaction, then reads the parent as it committed (kept, or archived
 *   with its result), or finds none (deleted: it had no children then) and
 *   inserts nothing.
 *
 * Either way the result is on the kept row when the release trigger runs,
 * after this statement, on a snapshot that sees every committed edge: it
 * records status and result there and releases the children, once (the
 * trigger fires on the one change to a final status).
 */
function keptSql(names: SchemaNames, results: boolean): string {
  const result = results ? `, result = ($5::text[])[${AT}]::jsonb` : '';
  return `UPDATE ${names.jobs} j SET status = 'succeeded', ${ENDED}, on_success = $4::text${result}
       ${LEASE_FENCE} AND j.cancel_requested_at IS NULL AND j.has_children
       ${RETURNED("'succeeded'", '0')}`;
}

/** Whether some success among `jobs` has a result to store. */
function hasResults(jobs: readonly FinishingJob[]): boolean {
  return jobs.some((j) => j.outcome === 'succeeded' && j.result !== undefined);
}

/** The results of `jobs` as JSON text, by position (null for none). */
function resultsOf(jobs: readonly FinishingJob[]): (string | null)[] {
  return jobs.map((j) => (j.outcome === 'succeeded' ? (j.result ?? null) : null));
}

/** A returned row. */
interface FinishedRow {
  id: string;
  /** Null for an `unwritten` success. */
  lease_seq: string | null;
  /** `unwritten`: a success the statement did not write. */
  outcome: FinishOutcome | 'unwritten';
  queue: string;
  retry_delay_ms: number;
}

/** The finish statements of one schema. */
export class FinishQueries {
  readonly #names: SchemaNames;
  /** Each variant's statement, made when first used. */
  readonly #statements = new Map<string, Statement>();

  constructor(names: SchemaNames) {
    this.#names = names;
  }

  /**
   * Writes the results of held jobs in one statement, each fenced by its lease
   * (see the file's header for what each becomes); `policy` says what a success
   * leaves. Successes under 'delete' or 'archive' that it did not write (jobs
   * with children, or whose lease is gone) are sent to {@link keptSql}, a
   * second statement, so each job is still written by one statement. A job may appear once per lease; of two leases of one job only the
   * newer can be current, so the older is left out.
   *
   * @returns what was written, by lease key (see leaseKey); a job absent from it
   *   was not written: its lease is gone, or a cancel was requested meanwhile
   *   (read its state to tell).
   * @throws {DatabaseError} from the database.
   */
  async finish(
    db: Queryable,
    jobs: readonly FinishingJob[],
    workerId: string,
    policy: SuccessPolicy,
  ): Promise<Map<string, FinishedJob>> {
    const written = new Map<string, FinishedJob>();
    if (jobs.length === 0) return written;
    const batch = newestLeasePerJob(jobs);
    const groups = {
      delete: [] as FinishingJob[],
      keep: [] as FinishingJob[],
      archive: [] as FinishingJob[],
      failed: [] as FinishingJob[],
      snoozed: [] as FinishingJob[],
      cancelled: [] as FinishingJob[],
    };
    for (const job of batch) {
      if (job.outcome === 'succeeded') groups[job.onSuccess ?? policy].push(job);
      else groups[job.outcome].push(job);
    }
    const ownArrays = Object.values(groups).filter((g) => g.length > 0).length > 1;
    const values: unknown[] = [...leaseFenceArrays(batch), workerId];
    const own = (group: FinishingJob[]) => {
      if (ownArrays) values.push(...leaseFenceArrays(group));
    };
    const success: SuccessPart[] = [];
    for (const p of ['delete', 'keep', 'archive'] as const) {
      const group = groups[p];
      if (group.length === 0) continue;
      own(group);
      // Only when some job has a result and its row stays ('delete' keeps none: a job with
      // children gets its result from the kept statement below).
      const results = p !== 'delete' && hasResults(group);
      if (results) values.push(resultsOf(group));
      success.push({ policy: p, results });
    }
    if (groups.failed.length > 0) {
      own(groups.failed);
      const failures = groups.failed as (LeasedJob & Extract<AttemptResult, { outcome: 'failed' }>)[];
      values.push(
        failures.map((f) => f.error),
        failures.map((f) => f.permanent),
        failures.map((f) => f.retryDelayMs ?? null),
      );
    }
    if (groups.snoozed.length > 0) {
      own(groups.snoozed);
      values.push((groups.snoozed as (LeasedJob & { delayMs: number })[]).map((s) => s.delayMs));
    }
    const variant: Variant = {
      success,
      failure: groups.failed.length > 0,
      snooze: groups.snoozed.length > 0,
      ownArrays,
    };
    /** Ids of successes the statement did not write (a lease gone, children, a cancel requested). */
    const unwritten = new Set<string>();
    const add = (rows: FinishedRow[]) => {
      for (const r of rows) {
        if (r.outcome === 'unwritten' || r.lease_seq === null) unwritten.add(r.id);
        else if (r.outcome === 'succeeded')
          written.set(`${r.id}#${r.lease_seq}`, {
            id: r.id,
            leaseSeq: r.lease_seq,
            outcome: r.outcome,
            retryDelayMs: 0,
          });
        else
          written.set(`${r.id}#${r.lease_seq}`, {
            id: r.id,
            leaseSeq: r.lease_seq,
            outcome: r.outcome,
            queue: r.queue,
            retryDelayMs: r.retry_delay_ms,
          });
      }
    };
    add((await run<FinishedRow>(db, this.#statement(variant), values)).rows);
    for (const group of [groups.delete, groups.keep, groups.archive]) {
      for (const job of group) {
        const key = leaseKey(job);
        if (!unwritten.has(job.id) && !written.has(key))
          written.set(key, { id: job.id, leaseSeq: job.leaseSeq, outcome: 'succeeded', retryDelayMs: 0 });
      }
    }
    for (const p of ['delete', 'archive'] as const) {
      const left = groups[p].filter((j) => !written.has(leaseKey(j)));
      if (left.length === 0) continue;
      const results = hasResults(left);
      const keptValues: unknown[] = [...leaseFenceArrays(left), workerId, p];
      if (results) keptValues.push(resultsOf(left));
      add((await run<FinishedRow>(db, this.#kept(results), keptValues)).rows);
    }
    return written;
  }

  #kept(results: boolean): Statement {
    return this.#cached(results ? 'finish_kept_results' : 'finish_kept', () => keptSql(this.#names, results));
  }

  #statement(variant: Variant): Statement {
    const { failure, snooze, ownArrays } = variant;
    const success =
      variant.success.map((p) => `${p.policy}${p.results ? '_results' : ''}`).join('_') || 'none';
    const name = `finish_${success}${failure ? '_failed' : ''}${snooze ? '_snoozed' : ''}${ownArrays ? '_own' : ''}`;
    return this.#cached(name, () => finishSql(this.#names, variant));
  }

  /** The statement `name`, made by `sql` when first used. */
  #cached(name: string, sql: () => string): Statement {
    let statement = this.#statements.get(name);
    if (!statement) {
      statement = this.#names.statement(name, sql());
      this.#statements.set(name, statement);
    }
    return statement;
  }
}
