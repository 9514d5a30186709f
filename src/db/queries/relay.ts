/**
 * The relay's statements: claim due jobs of the relayed queues under a lease
 * (`running`, `locked_by` = the relay), remove them once the broker
 * acknowledged them (fenced by that lease), give back the ones it could not
 * publish; and the broker-side worker's write-back of a job that ended `dead`
 * or `failed`, so requeue, the CLI and the dashboard still see it.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** A row the relay claimed, as it goes into the message. */
export interface RelayRow {
  id: string;
  queue: string;
  kind: string;
  payload: unknown;
  priority: number;
  run_at: Date;
  attempts: number;
  max_attempts: number;
  max_attempts_default: boolean;
  lease_seq: string;
  created_at: Date;
  errors: unknown;
  tags: string[] | null;
}

/** What the relay claims, and under whose lease. */
export interface RelayClaimRequest {
  /** Queues to relay (at least one). */
  queues: readonly string[];
  /** Most jobs to claim. */
  limit: number;
  /** Recorded in `locked_by`: the relay's id. */
  relayId: string;
  /** Recorded on the row: the sweeper gives the job back once `locked_at` is this old. */
  visibilityTimeoutMs: number;
}

/** A job that ended on a broker-side worker, to be written back. */
export interface WriteBackRow {
  id: string;
  queue: string;
  kind: string;
  payload: unknown;
  priority: number;
  runAt: Date;
  createdAt: Date;
  maxAttempts: number;
  maxAttemptsDefault: boolean;
  /** The lease number the job was relayed with: the written row takes the next. */
  leaseSeq: string;
  status: 'dead' | 'failed';
  attempts: number;
  lastError: string;
  /** The whole attempt history, as stored in the `errors` column. */
  errors: unknown[];
  /** The job's tags; null or empty when it has none. */
  tags: readonly string[] | null;
}

/** The relay's statements on one schema. */
export class RelayQueries {
  readonly #claim: Statement;
  readonly #remove: Statement;
  readonly #release: Statement;
  readonly #writeBack: Statement;
  readonly #database: Statement;

  constructor(names: SchemaNames) {
    // Paused queues are skipped; cancelled jobs are not queued, so never relayed;
    // a job past its start deadline is left for the sweeper to expire.
    // The lease number is left as it is: a job given back by the sweeper is
    // published again under the same message id, which the broker drops.
    this.#claim = names.statement(
      'relay_claim',
      `WITH picked AS (
         SELECT id FROM ${names.jobs}
         WHERE status = 'queued' AND run_at <= now()
           AND (start_by IS NULL OR start_by >= now())
           AND queue = ANY(ARRAY(SELECT n FROM unnest($1::text[]) n
                                 WHERE NOT EXISTS (SELECT FROM ${names.queues} q WHERE q.name = n AND q.paused)))
         ORDER BY priority DESC, run_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       )
       UPDATE ${names.jobs} j
       SET status = 'running', locked_at = now(), locked_by = $3, visibility_timeout_ms = $4
       WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
       RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
                 j.max_attempts_default, j.lease_seq, j.created_at, j.errors, j.tags`,
    );
    this.#remove = names.statement(
      'relay_remove',
      `DELETE FROM ${names.jobs}
       WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
       RETURNING id`,
    );
    this.#release = names.statement(
      'relay_release',
      `UPDATE ${names.jobs} SET status = 'queued', locked_at = NULL, locked_by = NULL
       WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2`,
    );
    // The row keeps its id. If the relay has not removed it yet (the broker
    // was faster), the relayed row of the same lease is overwritten; a row of
    // a later lease (requeued since) is left alone.
    this.#writeBack = names.statement(
      'relay_write_back',
      `INSERT INTO ${names.jobs} AS j
         (id, queue, kind, payload, priority, run_at, created_at, max_attempts, max_attempts_default,
          lease_seq, status, attempts, last_error, errors, tags, finished_at)
       OVERRIDING SYSTEM VALUE
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint + 1, $11, $12, $13, $14, $15::text[], now())
       ON CONFLICT (id) DO UPDATE
       SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
           errors = EXCLUDED.errors, finished_at = now(), lease_seq = EXCLUDED.lease_seq,
           locked_at = NULL, locked_by = NULL
       WHERE j.lease_seq = $10::bigint AND j.status IN ('queued', 'running')
       RETURNING id`,
    );
    this.#database = names.statement(
      'relay_database',
      `SELECT (SELECT system_identifier FROM pg_control_system())::text AS system_identifier,
              current_database() AS database`,
    );
  }

  /** Claims up to `request.limit` due jobs of the relayed queues, highest priority and oldest first (rows in no order). */
  async claim(db: Queryable, request: RelayClaimRequest): Promise<RelayRow[]> {
    const { rows } = await run<RelayRow>(db, this.#claim, [
      request.queues,
      request.limit,
      request.relayId,
      Math.round(request.visibilityTimeoutMs),
    ]);
    return rows;
  }

  /** Deletes published jobs the relay still holds; returns the ids it deleted. */
  async remove(db: Queryable, ids: readonly string[], relayId: string): Promise<string[]> {
    const { rows } = await run<{ id: string }>(db, this.#remove, [ids, relayId]);
    return rows.map((row) => row.id);
  }

  /** Gives jobs the relay holds back to `queued` (not published); returns how many. */
  async release(db: Queryable, ids: readonly string[], relayId: string): Promise<number> {
    const result = await run(db, this.#release, [ids, relayId]);
    return result.rowCount ?? 0;
  }

  /** Writes a job that ended on a broker back to the jobs table; false when a later lease owns the id. */
  async writeBack(db: Queryable, row: WriteBackRow): Promise<boolean> {
    const result = await run(db, this.#writeBack, [
      row.id,
      row.queue,
      row.kind,
      JSON.stringify(row.payload),
      row.priority,
      row.runAt,
      row.createdAt,
      row.maxAttempts,
      row.maxAttemptsDefault,
      row.leaseSeq,
      row.status,
      row.attempts,
      row.lastError,
      JSON.stringify(row.errors),
      row.tags && row.tags.length > 0 ? row.tags : null,
    ]);
    return (result.rowCount ?? 0) > 0;
  }

  /** The database's identity: the cluster's system identifier and the database's name. */
  async database(db: Queryable): Promise<{ systemIdentifier: string; database: string }> {
    const { rows } = await run<{ system_identifier: string; database: string }>(db, this.#database, []);
    const row = rows[0]!;
    return { systemIdentifier: row.system_identifier, database: row.database };
  }
}
