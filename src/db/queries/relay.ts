/**
 * The relay's statements: claim due jobs of the relayed queues under a lease
 * (`running`, `locked_by` = the relay), remove them once the broker
 * acknowledged them (fenced by that lease), give back the ones it could not
 * publish, end `failed` the ones the broker refuses; and the broker-side
 * worker's write-back of a job that ended `dead` or `failed`, so requeue, the
 * CLI and the dashboard still see it.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { ClaimRow } from './claim.js';
import type { SchemaNames } from './schema-names.js';

/**
 * A row the relay claimed, as it goes into the message: the columns a worker's
 * claim returns (without the trace context and success policy), and the ones
 * a write-back needs.
 */
export interface RelayRow
  extends Omit<ClaimRow, 'trace_context' | 'on_success' | 'run_at_ms' | 'created_at_ms'> {
  run_at: Date;
  created_at: Date;
  max_attempts_default: boolean;
  errors: unknown;
  tags: string[] | null;
  group_key: string | null;
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
  /** The job's group key; null when it has none. */
  groupKey: string | null;
}

/** A relayed queue's backlog, from {@link RelayQueries.stats}. */
export interface RelayQueueStatsRow {
  /** The queue. */
  queue: string;
  /** Live relays that relay it (registered, heartbeat not expired). */
  relays: number;
  /** Jobs of it waiting to be relayed: queued and due (run_at passed), not yet claimed. */
  waiting: number;
  /**
   * The relay's lag: milliseconds since the `run_at` of the oldest waiting job,
   * by the database's clock; null when none waits.
   */
  lagMs: number | null;
  /** Jobs of it a relay claimed and is publishing (`running`, `locked_by` a registered relay). */
  inFlight: number;
  /**
   * Jobs the live relays relaying it published, acknowledged and removed since
   * they started (as of their last heartbeat); a relay counts its jobs of all
   * its queues together, so a relay of several queues adds its whole count to each.
   */
  published: number;
}

/** The relay's statements on one schema. */
export class RelayQueries {
  readonly #register: Statement;
  readonly #unregister: Statement;
  readonly #stats: Statement;
  readonly #claim: Statement;
  readonly #remove: Statement;
  readonly #release: Statement;
  readonly #refuse: Statement;
  readonly #writeBack: Statement;
  readonly #database: Statement;

  constructor(names: SchemaNames) {
    const { relays } = names;
    // A relay's row, written again on every heartbeat; rows of relays that
    // expired an hour ago (killed ones) are cleared on the way.
    this.#register = names.statement(
      'relay_register',
      `WITH gone AS (DELETE FROM ${relays} WHERE expires_at < now() - interval '1 hour' AND id <> $1)
       INSERT INTO ${relays} AS r (id, queues, target, published, expires_at)
       VALUES ($1, $2::text[], $3, $4, now() + make_interval(secs => $5::float8 / 1000))
       ON CONFLICT (id) DO UPDATE
       SET queues = EXCLUDED.queues, target = EXCLUDED.target, published = EXCLUDED.published,
           heartbeat_at = now(), expires_at = EXCLUDED.expires_at`,
    );
    this.#unregister = names.statement('relay_unregister', `DELETE FROM ${relays} WHERE id = $1`);
    // A queue is relayed while a live relay names it. Waiting and lag read the
    // queued partial index like stats(); in flight are running jobs held by any
    // registered relay (a killed relay's jobs count until the sweeper gives them back).
    this.#stats = names.statement(
      'relay_stats',
      `WITH live AS (
         SELECT id, queues, published FROM ${relays} WHERE expires_at > now()
       ), relayed AS (
         SELECT q AS queue, count(*)::int AS relays FROM live, unnest(live.queues) q GROUP BY q
       )
       SELECT r.queue, r.relays,
              w.waiting, (EXTRACT(EPOCH FROM now() - w.oldest) * 1000)::float8 AS lag_ms,
              (SELECT count(*)::int FROM ${names.jobs} j
               WHERE j.status = 'running' AND j.queue = r.queue
                 AND j.locked_by IN (SELECT id FROM ${relays})) AS in_flight,
              (SELECT COALESCE(sum(l.published), 0)::float8 FROM live l WHERE r.queue = ANY(l.queues)) AS published
       FROM relayed r
       CROSS JOIN LATERAL (
         SELECT count(*)::int AS waiting, min(j.run_at) AS oldest FROM ${names.jobs} j
         WHERE j.status = 'queued' AND j.queue = r.queue AND j.run_at <= now()
       ) w
       ORDER BY r.queue`,
    );
    // Paused queues are skipped; cancelled jobs are not queued, so never relayed;
    // a job past its start deadline is left for the sweeper to expire.
    // The lease number is left as it is: a job given back by the sweeper is
    // published again under the same message id, which the broker drops.
    // Each queue's first jobs are read in the claim index's order (queue,
    // priority DESC, run_at), a batch's worth, passing over keys with a job
    // running; a key met there is then read from the group claim index in its
    // own full order (priority DESC, run_at, id), as many of its jobs as the
    // first read met: jobs of one transaction share a run_at, and only the id
    // orders them. So a claim costs its batch, not the backlog. The first batch
    // of that order across the queues is locked (SKIP LOCKED) and returned in
    // it (run_at to the microsecond).
    // A job with a group key is claimed only when every job of its key and
    // queue ahead of it (running, or queued, due, not past its start deadline
    // and earlier in the order priority DESC, run_at, id) is claimed with it: a
    // key's later job is never published before an earlier one was
    // acknowledged and removed. A job another relay holds still reads as
    // queued or running here, so two relays never hold one key's jobs at once.
    this.#claim = names.statement(
      'relay_claim',
      `WITH scan AS (
         SELECT w.id, w.queue, w.group_key, w.priority, w.run_at
         FROM unnest($1::text[]) n
         CROSS JOIN LATERAL (
           SELECT k.id, k.queue, k.group_key, k.priority, k.run_at FROM ${names.jobs} k
           WHERE k.status = 'queued' AND k.queue = n AND k.run_at <= now()
             AND (k.start_by IS NULL OR k.start_by >= now())
             AND NOT EXISTS (SELECT FROM ${names.queues} q WHERE q.name = n AND q.paused)
             AND (k.group_key IS NULL OR NOT EXISTS (
                   SELECT FROM ${names.jobs} r
                   WHERE r.status = 'running' AND r.group_key IS NOT NULL
                     AND r.queue = n AND r.group_key = k.group_key))
           ORDER BY k.priority DESC, k.run_at
           LIMIT $2
         ) w
       ), candidates AS (
         -- Jobs without a key as read; for each key met, its first jobs in its
         -- own order (ord), as many as the read met.
         SELECT id, queue, group_key, priority, run_at, 0::bigint AS ord FROM scan WHERE group_key IS NULL
         UNION ALL
         SELECT h.id, g.queue, g.group_key, h.priority, h.run_at, h.ord
         FROM (SELECT queue, group_key, count(*) AS seen FROM scan WHERE group_key IS NOT NULL
               GROUP BY queue, group_key) g
         CROSS JOIN LATERAL (
           SELECT e.id, e.priority, e.run_at, row_number() OVER (ORDER BY e.priority DESC, e.run_at, e.id) AS ord
           FROM (SELECT e.id, e.priority, e.run_at FROM ${names.jobs} e
                 WHERE e.status = 'queued' AND e.group_key IS NOT NULL
                   AND e.queue = g.queue AND e.group_key = g.group_key AND e.run_at <= now()
                   AND (e.start_by IS NULL OR e.start_by >= now())
                 ORDER BY e.priority DESC, e.run_at, e.id
                 LIMIT g.seen) e
         ) h
       ), picked AS (
         SELECT l.id, c.queue, c.group_key, c.ord
         FROM (SELECT id, queue, group_key, ord FROM candidates
               ORDER BY priority DESC, run_at, id LIMIT $2) c
         CROSS JOIN LATERAL (
           SELECT j.id FROM ${names.jobs} j
           WHERE j.id = c.id AND j.status = 'queued' AND j.run_at <= now()
             AND (j.start_by IS NULL OR j.start_by >= now())
           FOR UPDATE OF j SKIP LOCKED
         ) l
       ), free AS (
         -- A keyed job is free when every job of its key before it is picked
         -- too (a key read here has no job running: the first read passed over
         -- those that had).
         SELECT p.id FROM picked p
         WHERE p.group_key IS NULL
            OR NOT EXISTS (
                 SELECT FROM candidates b
                 WHERE b.group_key = p.group_key AND b.queue = p.queue AND b.ord < p.ord
                   AND b.id NOT IN (SELECT id FROM picked))
       )
       , claimed AS (
         UPDATE ${names.jobs} j
         SET status = 'running', locked_at = now(), locked_by = $3, visibility_timeout_ms = $4
         WHERE j.id = ANY(ARRAY(SELECT id FROM free))
         RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
                   j.max_attempts_default, j.lease_seq, j.created_at, j.errors, j.tags, j.group_key
       )
       SELECT * FROM claimed ORDER BY priority DESC, run_at, id`,
    );
    // Remove and release take the ids as a subquery's array: with statistics
    // from before a backlog, a parameter array of a batch's size had the planner
    // read the whole table.
    this.#remove = names.statement(
      'relay_remove',
      `DELETE FROM ${names.jobs}
       WHERE id = ANY(ARRAY(SELECT unnest($1::bigint[]))) AND status = 'running' AND locked_by = $2
       RETURNING id`,
    );
    this.#release = names.statement(
      'relay_release',
      `UPDATE ${names.jobs} SET status = 'queued', locked_at = NULL, locked_by = NULL
       WHERE id = ANY(ARRAY(SELECT unnest($1::bigint[]))) AND status = 'running' AND locked_by = $2`,
    );
    // A job the broker can never take ends failed with the reason, its
    // attempts as they were (it never ran); requeue brings it back.
    this.#refuse = names.statement(
      'relay_refuse',
      `UPDATE ${names.jobs} j
       SET status = 'failed', last_error = r.reason, finished_at = now(), locked_at = NULL, locked_by = NULL
       FROM unnest($1::bigint[], $2::text[]) AS r(id, reason)
       WHERE j.id = r.id AND j.status = 'running' AND j.locked_by = $3`,
    );
    // The row keeps its id. If the relay has not removed it yet (the broker
    // was faster), the relayed row of the same lease is overwritten; a row of
    // a later lease (requeued since) is left alone.
    this.#writeBack = names.statement(
      'relay_write_back',
      `INSERT INTO ${names.jobs} AS j
         (id, queue, kind, payload, priority, run_at, created_at, max_attempts, max_attempts_default,
          lease_seq, status, attempts, last_error, errors, tags, group_key, finished_at)
       OVERRIDING SYSTEM VALUE
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint + 1, $11, $12, $13, $14, $15::text[], $16, now())
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

  /**
   * Registers a relay (or renews its registration): it counts as live for
   * `ttlMs` milliseconds from now, by the database's clock.
   */
  async register(
    db: Queryable,
    relay: { id: string; queues: readonly string[]; target: string; published: number; ttlMs: number },
  ): Promise<void> {
    await run(db, this.#register, [relay.id, relay.queues, relay.target, relay.published, relay.ttlMs]);
  }

  /** Deletes a relay's registration. */
  async unregister(db: Queryable, relayId: string): Promise<void> {
    await run(db, this.#unregister, [relayId]);
  }

  /** Per queue that a live relay relays: waiting jobs, lag, jobs in flight, published count. */
  async stats(db: Queryable): Promise<RelayQueueStatsRow[]> {
    const { rows } = await run<{
      queue: string;
      relays: number;
      waiting: number;
      lag_ms: number | null;
      in_flight: number;
      published: number;
    }>(db, this.#stats, []);
    return rows.map((r) => ({
      queue: r.queue,
      relays: r.relays,
      waiting: r.waiting,
      lagMs: r.lag_ms,
      inFlight: r.in_flight,
      published: r.published,
    }));
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

  /** Ends `failed` jobs the relay holds and the broker refuses, `reasons[i]` the last error of `ids[i]`; returns how many. */
  async refuse(
    db: Queryable,
    ids: readonly string[],
    reasons: readonly string[],
    relayId: string,
  ): Promise<number> {
    const result = await run(db, this.#refuse, [ids, reasons, relayId]);
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
      row.groupKey,
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
