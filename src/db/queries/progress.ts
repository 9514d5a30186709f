/**
 * The handler's progress and log lines, written while its lease is held: one
 * statement sets the last progress value and appends log lines (kept newest
 * {@link MAX_LOG_LINES}), fenced like every result (see job-row.ts). A lease
 * that was reclaimed changes nothing, and neither does a row another
 * transaction holds locked (a child's enqueue naming the job as its parent,
 * perhaps in the job's own transactional handler): progress is advisory, and
 * waiting could outlast that transaction's own wait for the handler.
 */
import { MAX_LOG_LINES } from '../../workflow/job-output.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { LEASE_FENCE, type LeasedJob, leaseParams } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** What a progress write did: see {@link ProgressQueries.write}. */
export type ProgressWriteOutcome = 'written' | 'locked' | 'lost';

/** Statements of progress and log lines. */
export class ProgressQueries {
  readonly #write: Statement;

  constructor(names: SchemaNames) {
    // $4: progress as JSON text, or null to leave it; $5: log lines to append (may be empty).
    // jsonpath's lax mode takes `last-49` before the first element as the first.
    this.#write = names.statement(
      'write_progress',
      `WITH written AS (
       UPDATE ${names.jobs} j
       SET progress = COALESCE($4::text::jsonb, j.progress),
           logs = CASE WHEN cardinality($5::text[]) = 0 THEN j.logs
                       ELSE jsonb_path_query_array(
                              COALESCE(j.logs, '[]'::jsonb)
                                || (SELECT jsonb_agg(jsonb_build_object('at', now(), 'line', l) ORDER BY n)
                                    FROM unnest($5::text[]) WITH ORDINALITY AS u(l, n)),
                              '$[last-${MAX_LOG_LINES - 1} to last]') END
       WHERE j.id IN (SELECT j.id FROM ${names.jobs} j ${LEASE_FENCE} FOR UPDATE SKIP LOCKED)
       RETURNING j.id
       )
       SELECT CASE WHEN EXISTS (SELECT FROM written) THEN 'written'
                   WHEN EXISTS (SELECT FROM ${names.jobs} j ${LEASE_FENCE}) THEN 'locked'
                   ELSE 'lost' END AS outcome`,
    );
  }

  /**
   * Sets the job's progress (`progressJson`, JSON text; null leaves it) and
   * appends `lines` to its log, if `lease` is still held by `workerId`.
   *
   * @returns `'written'`; `'locked'`: the lease is held but another
   *   transaction holds the row locked, nothing was written; `'lost'`: the
   *   lease is not held, nothing was written.
   * @throws {DatabaseError} from the database.
   */
  async write(
    db: Queryable,
    lease: LeasedJob,
    workerId: string,
    progressJson: string | null,
    lines: readonly string[],
  ): Promise<ProgressWriteOutcome> {
    const { rows } = await run<{ outcome: ProgressWriteOutcome }>(db, this.#write, [
      ...leaseParams([lease], workerId),
      progressJson,
      lines,
    ]);
    return rows[0]!.outcome;
  }
}
