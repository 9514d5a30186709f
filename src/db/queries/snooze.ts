/**
 * Snooze: a handler asked to run its job again later. The job goes back to
 * `queued` at `now() + delay` (database clock) without charging the attempt,
 * fenced by the lease like every result.
 */
import type pg from 'pg';
import { run, type Statement } from '../executor.js';
import { type LeasedJob, leaseParams, RESULT_FENCE } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** A job to snooze, and for how long (milliseconds). */
export interface SnoozedJob extends LeasedJob {
  delayMs: number;
}

/** What the snooze wrote for one job. */
export interface SnoozeOutcome extends LeasedJob {
  queue: string;
  /** Milliseconds until the job is due again. */
  delayMs: number;
}

/** The snooze statement. */
export class SnoozeQueries {
  readonly #snooze: Statement;

  constructor(names: SchemaNames) {
    this.#snooze = names.statement(
      'snooze',
      `UPDATE ${names.jobs} j
       SET status = 'queued', locked_at = NULL, locked_by = NULL, attempts = j.attempts - 1,
           run_at = now() + r.delay_ms * interval '1 millisecond'
       FROM unnest($1::bigint[], $2::int[], $3::bigint[], $5::float8[]) AS r(id, attempts, lease_seq, delay_ms)
       ${RESULT_FENCE}
       RETURNING j.id, r.attempts, j.lease_seq, j.queue, r.delay_ms`,
    );
  }

  /** Puts held jobs back to `queued` after their delay, attempts − 1; returns what it wrote. */
  async snooze(
    pool: Pick<pg.Pool, 'query'>,
    jobs: readonly SnoozedJob[],
    workerId: string,
  ): Promise<SnoozeOutcome[]> {
    const { rows } = await run<{
      id: string;
      attempts: number;
      lease_seq: string;
      queue: string;
      delay_ms: number;
    }>(pool, this.#snooze, [...leaseParams(jobs, workerId), jobs.map((j) => j.delayMs)]);
    return rows.map((r) => ({
      id: r.id,
      attempts: r.attempts,
      leaseSeq: r.lease_seq,
      queue: r.queue,
      delayMs: r.delay_ms,
    }));
  }
}
