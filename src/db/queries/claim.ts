/**
 * The claim: `queued → running` for a batch of due jobs, in one statement with
 * `FOR UPDATE SKIP LOCKED`, so any number of workers claim side by side without
 * blocking each other and no job is claimed twice. Jobs of paused queues are
 * not claimed, nor jobs of limited queues (see claim-limited.ts).
 */
import type pg from 'pg';
import type { Job } from '../../job/job.js';
import {
  type NamedStatements,
  type Queryable,
  type QueryResultLike,
  run,
  runNamedIfKept,
  runPrepared,
  type Statement,
} from '../executor.js';
import type { SuccessPolicy } from './finish.js';
import { GROUPED } from './queue-limits.js';
import type { SchemaNames } from './schema-names.js';

/** A claimed job as its handler sees it, plus the lease number its result is fenced by. */
export interface ClaimedJob extends Job {
  leaseSeq: string;
  /** The job's own success policy (enqueue option `onSuccess`); absent: the worker's. */
  onSuccess?: SuccessPolicy;
  /** The job's stored `trace_context` as JSON text (null when none); only when the request asked for it. */
  traceContext?: string | null;
}

/** What to claim, and for whom. */
export interface ClaimRequest {
  /** Queues to claim from (at least one). */
  queues: readonly string[];
  /** Only jobs of these kinds (the worker's handlers). */
  kinds: readonly string[];
  /** Most jobs to claim. */
  limit: number;
  /** Recorded in `locked_by`. */
  workerId: string;
  /** Recorded on the row: the sweeper reclaims the lease once `locked_at` is this old. */
  visibilityTimeoutMs: number;
  /**
   * Send the claim as a named prepared statement (planned the same way for any
   * input); false sends it unnamed, for poolers that do not carry prepared
   * statements. @default true
   */
  prepared?: boolean;
  /**
   * A worker's switch for its named claims (see `runNamedIfKept`), which
   * `prepared` then leaves alone: named while on; the first refusal that says
   * its connections do not keep named statements (a transaction pooler) turns
   * it off, and that claim, which never ran, goes again unnamed. Absent, a
   * refusal is an error.
   */
  named?: NamedStatements;
  /**
   * Kinds whose handler gives `maxAttempts`, and theirs: a claimed job of such
   * a kind whose producer left `maxAttempts` out takes the kind's. Absent, the
   * claim leaves `max_attempts` as it is (and is the plain claim statement).
   */
  kindMaxAttempts?: KindMaxAttempts | undefined;
  /** Also return each job's `trace_context` (tracing on). @default false */
  traceContext?: boolean;
}

/**
 * The SET item of a claim that applies kinds' `maxAttempts` ($6 kinds, $7
 * theirs): a job whose producer left max_attempts out takes its kind's at
 * every claim, so the row holds the value its failures are judged by; a kind
 * without one (or NULL arrays) keeps the row's.
 */
export const KIND_MAX_ATTEMPTS = `max_attempts = CASE WHEN j.max_attempts_default
                          THEN COALESCE(($7::int[])[array_position($6::text[], j.kind)], j.max_attempts)
                          ELSE j.max_attempts END`;

/** Kinds and their `maxAttempts`, side by side. */
export interface KindMaxAttempts {
  kinds: readonly string[];
  maxAttempts: readonly number[];
}

/**
 * A timestamp column as milliseconds since the epoch (float8, whole): the
 * claim's timestamps become `Date`s from a number instead of from text, which
 * cost the worker about a microsecond a job. Exact on PostgreSQL 14 and later,
 * where `extract` is numeric.
 */
export function epochMs(column: string): string {
  return `floor(extract(epoch FROM ${column}) * 1000)::float8`;
}

/** A row the claim statements return. */
export interface ClaimRow {
  id: string;
  queue: string;
  kind: string;
  payload: unknown;
  priority: number;
  /** `run_at` in milliseconds since the epoch (see {@link epochMs}). */
  run_at_ms: number;
  attempts: number;
  max_attempts: number;
  lease_seq: string;
  /** `created_at` in milliseconds since the epoch. */
  created_at_ms: number;
  trace_context?: string | null;
  /** The job's own success policy; null: the worker's. */
  on_success?: SuccessPolicy | null;
}

/**
 * The claim statements: one queue, or any of several (two shapes, two
 * statements), each also in variants that apply kinds' `maxAttempts` and
 * return the trace context; the plain ones serve a worker that needs neither.
 */
export class ClaimQueries {
  /** Variants by (kinds' maxAttempts ? 1 : 0) + (trace context ? 2 : 0): [one queue, any queue]. */
  readonly #variants: [Statement, Statement][];

  constructor(names: SchemaNames) {
    // Priority then age; only kinds the worker handles, so workers of different
    // versions share a queue without burning each other's attempts; never a job
    // past its start deadline (the sweeper ends those). The update
    // finds its rows by primary key (= ANY): joining the CTE instead lets a
    // generic plan, which guesses LIMIT at 10% of the table, hash the whole table.
    const claim = (queueFilter: string, setMore = '', traceColumn = '') => `WITH picked AS (
         SELECT id FROM ${names.jobs}
         WHERE status = 'queued' AND ${queueFilter} AND run_at <= now() AND kind = ANY($5::text[])
           AND (start_by IS NULL OR start_by >= now())
         ORDER BY priority DESC, run_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       )
       UPDATE ${names.jobs} j
       SET status = 'running', locked_at = now(), attempts = j.attempts + 1, lease_seq = j.lease_seq + 1,
           locked_by = $3, visibility_timeout_ms = $4${setMore}
       WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
       RETURNING j.id, j.queue, j.kind, j.payload, j.priority, ${epochMs('j.run_at')} AS run_at_ms,
                 j.attempts, j.max_attempts, j.lease_seq, ${epochMs('j.created_at')} AS created_at_ms,
                 j.on_success${traceColumn}`;
    // Paused queues are skipped, and so are limited and grouped ones (the limited claim
    // takes them), should a worker not have heard of their limits yet. Both
    // filters are uncorrelated subqueries, evaluated once per claim (one index
    // probe per queue), not once per row.
    const skipped = `(q.paused OR q.concurrency_limit IS NOT NULL OR q.rate_count IS NOT NULL OR ${GROUPED})`;
    const one = `queue = $1 AND NOT EXISTS (SELECT FROM ${names.queues} q WHERE q.name = $1 AND ${skipped})`;
    const any = `queue = ANY(ARRAY(SELECT n FROM unnest($1::text[]) n
                               WHERE NOT EXISTS (SELECT FROM ${names.queues} q WHERE q.name = n AND ${skipped})))`;
    const policy = `, ${KIND_MAX_ATTEMPTS}`;
    // With tracing on, statements of their own also return the trace context,
    // as text: jobs of one enqueue call share it, and the worker parses it once.
    const traceColumn = ', j.trace_context::text AS trace_context';
    this.#variants = [
      [names.statement('claim', claim(one)), names.statement('claim_any', claim(any))],
      [
        names.statement('claim_policy', claim(one, policy)),
        names.statement('claim_any_policy', claim(any, policy)),
      ],
      [
        names.statement('claim_traced', claim(one, '', traceColumn)),
        names.statement('claim_any_traced', claim(any, '', traceColumn)),
      ],
      [
        names.statement('claim_policy_traced', claim(one, policy, traceColumn)),
        names.statement('claim_any_policy_traced', claim(any, policy, traceColumn)),
      ],
    ];
  }

  /**
   * Claims up to `limit` due jobs: attempts + 1, lease stamped; returned in
   * claim order ({@link inClaimOrder}). Sent as a named prepared statement
   * unless `request.prepared` is false.
   *
   * @throws {DatabaseError} from the database.
   */
  async claim(pool: Pick<pg.Pool, 'query'>, request: ClaimRequest): Promise<ClaimedJob[]> {
    const { statement, params } = this.statementFor(request);
    const { rows } = await sendClaim<ClaimRow>(pool, request, statement, params);
    const jobs = new Array<ClaimedJob>(rows.length);
    for (let i = 0; i < rows.length; i++) jobs[i] = claimedJob(rows[i]!, request.traceContext);
    return jobs.sort(inClaimOrder);
  }

  /** The statement and parameters {@link claim} sends for `request` (also what the benchmark's ceiling runs). */
  statementFor(request: ClaimRequest): { statement: Statement; params: unknown[] } {
    const single = request.queues.length === 1;
    const params: unknown[] = [
      single ? request.queues[0] : request.queues,
      request.limit,
      request.workerId,
      Math.round(request.visibilityTimeoutMs),
      request.kinds,
    ];
    const policy = request.kindMaxAttempts;
    if (policy) params.push(policy.kinds, policy.maxAttempts);
    const statement = this.#variants[(policy ? 1 : 0) + (request.traceContext ? 2 : 0)]![single ? 0 : 1];
    return { statement, params };
  }
}

/**
 * Claim order, for `Array.prototype.sort`: higher priority first, then earlier
 * `run_at` (to the millisecond; the sort is stable, so ties keep the order
 * PostgreSQL returned them in). The claim statement picks its rows in this
 * order but returns them in the order it updated them.
 */
export function inClaimOrder(a: ClaimedJob, b: ClaimedJob): number {
  return b.priority - a.priority || a.runAt.getTime() - b.runAt.getTime();
}

/** A claimed row as its handler sees it; the trace context only when asked for (tracing on). */
export function claimedJob(r: ClaimRow, traceContext: boolean | undefined): ClaimedJob {
  const job: ClaimedJob = {
    id: r.id,
    kind: r.kind,
    queue: r.queue,
    payload: r.payload,
    priority: r.priority,
    runAt: new Date(r.run_at_ms),
    attempts: r.attempts,
    maxAttempts: r.max_attempts,
    createdAt: new Date(r.created_at_ms),
    leaseSeq: r.lease_seq,
  };
  if (traceContext) job.traceContext = r.trace_context ?? null;
  if (r.on_success) job.onSuccess = r.on_success;
  return job;
}

/**
 * Sends a claim statement as the request asks: through `named` when given
 * (named while it is on), else unnamed when `prepared` is false, else named.
 */
export function sendClaim<Row>(
  db: Queryable,
  request: Pick<ClaimRequest, 'prepared' | 'named'>,
  statement: Statement,
  values: unknown[],
): Promise<QueryResultLike<Row>> {
  // A named statement needs a pg connection or pool (the worker's).
  const pgDb = db as Pick<pg.Pool, 'query'>;
  if (request.named) return runNamedIfKept<Row>(pgDb, statement, values, request.named);
  if (request.prepared === false) return run<Row>(db, statement, values);
  return runPrepared<Row>(pgDb, statement, values);
}
