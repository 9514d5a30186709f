/**
 * The handler's progress and log lines, written while its lease is held: one
 * statement sets the last progress value and appends log lines (kept newest
 * {@link MAX_LOG_LINES}), fenced like every result (see job-row.ts). A lease
 * that was reclaimed changes nothing.
 */
import { MAX_LOG_LINES } from '../../workflow/job-output.js';
import { type Queryable, run, type Statement } from '../executor.js';
import { LEASE_FENCE, type LeasedJob, leaseParams } from './job-row.js';
import type { SchemaNames } from './schema-names.js';

/** Statements of progress and log lines. */
export class ProgressQueries {
  readonly #write: Statement;

  constructor(names: SchemaNames) {
    // $4: progress as JSON text, or null to leave it; $5: log lines to append (may be empty).
    // jsonpath's lax mode takes `last-49` before the first element as the first.
    this.#write = names.statement(
      'write_progress',
      `UPDATE ${names.jobs} j
       SET progress = COALESCE($4::text::jsonb, j.progress),
           logs = CASE WHEN cardinality($5::text[]) = 0 THEN j.logs
                       ELSE jsonb_path_query_array(
                              COALESCE(j.logs, '[]'::jsonb)
                                || (SELECT jsonb_agg(jsonb_build_object('at', now(), 'line', l) ORDER BY n)
                                    FROM unnest($5::text[]) WITH ORDINALITY AS u(l, n)),
                              '$[last-${MAX_LOG_LINES - 1} to last]') END
       ${LEASE_FENCE}
       RETURNING j.id`,
    );
  }

  /**
   * Sets the job's progress (`progressJson`, JSON text; null leaves it) and
   * appends `lines` to its log, if `lease` is still held by `workerId`.
   *
   * @returns whether the lease was held (false: nothing was written).
   * @throws {DatabaseError} from the database.
   */
  async write(
    db: Queryable,
    lease: LeasedJob,
    workerId: string,
    progressJson: string | null,
    lines: readonly string[],
  ): Promise<boolean> {
    const { rows } = await run(db, this.#write, [...leaseParams([lease], workerId), progressJson, lines]);
    return rows.length === 1;
  }
}
