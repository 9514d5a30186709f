/**
 * Snooze: a handler asked to run its job again later. The job goes back to
 * `queued` at `now() + delay` (database clock) without charging the attempt,
 * fenced by the lease like every result.
 */
import type pg from 'pg';
import { run, type Statement } from '../executor.js';
import { AT, type LeasedJob, leaseParams, newestLeasePerJob, RESULT_FENCE } from './job-row.js';
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
           run_at = now() + ($4::float8[])[${AT}] * interval '1 millisecond'
       ${RESULT_FENCE}
       RETURNING j.id, j.attempts + 1 AS attempts, j.lease_seq, j.queue, ($4::float8[])[${AT}] AS delay_ms`,
    );
  }

  /** Puts held jobs back to `queued` after their delay, attempts − 1; returns what it wrote. */
  async snooze(
    pool: Pick<pg.Pool, 'query'>,
    jobs: readonly SnoozedJob[],
    workerId: string,
  ): Promise<SnoozeOutcome[]> {
    const batch = newestLeasePerJob(jobs);
    const { rows } = await run<{
      id: string;
      attempts: number;
      lease_seq: string;
      queue: string;
      delay_ms: number;
    }>(pool, this.#snooze, [...leaseParams(batch, workerId), batch.map((j) => j.delayMs)]);
    return rows.map((r) => ({
      id: r.id,
      attempts: r.attempts,
      leaseSeq: r.lease_seq,
      queue: r.queue,
      delayMs: r.delay_ms,
    }));
  }
}
