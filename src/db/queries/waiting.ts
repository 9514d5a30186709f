/**
 * The statements of `waitFor`: mark a job as awaited (so that its end sends a
 * completion message, see migrations 0014 and 0023) and read where jobs stand, in the
 * jobs table or the archive.
 */
import type { JobStatus } from '../../job/job.js';
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** Where an awaited job stands. */
export interface AwaitedState {
  id: string;
  status: JobStatus;
  result: unknown;
  lastError: string | null;
}

interface Row {
  id: string;
  status: JobStatus;
  result: unknown;
  last_error: string | null;
}

/**
 * The completion channel of a schema, `skipdone:<schema>`: as long as the
 * wake-up channel, so it fits PostgreSQL's 63-byte limit for every schema
 * name allowed. The trigger of migration 0023 builds the same text.
 */
export function doneChannel(names: Pick<SchemaNames, 'schema'>): string {
  return `skipdone:${names.schema}`;
}

/** Statements of waiters. */
export class WaitingQueries {
  readonly #watch: Statement;
  readonly #states: Statement;
  readonly channel: string;

  constructor(names: SchemaNames) {
    this.channel = doneChannel(names);
    // A job's row is in one table at a time (it moves to the archive in the statement that deletes it).
    const read = (
      ids: string,
    ) => `SELECT id, status, result, last_error FROM ${names.jobs} WHERE id = ANY(${ids})
       UNION ALL
       SELECT id, status, result, last_error FROM ${names.archive} WHERE id = ANY(${ids})`;
    // Marks an unfinished job as awaited (once: a flag already set is not
    // written again), then reads it. The read sees the row as before the
    // UPDATE (one snapshot). \`settled_meanwhile\`: the row was unfinished and
    // unmarked in that snapshot, yet not marked: the UPDATE waited for the
    // statement that ended the job, which sent no completion message (the row
    // was not marked yet), so the caller must read it again.
    this.#watch = names.statement(
      'watch_job',
      `WITH marked AS (
         UPDATE ${names.jobs} SET awaited = true
         WHERE id = $1 AND awaited IS NOT TRUE AND status NOT IN ('succeeded', 'failed', 'dead', 'cancelled')
         RETURNING id
       )
       SELECT r.*, NOT EXISTS (SELECT FROM marked) AND NOT r.awaited
                   AND r.status NOT IN ('succeeded', 'failed', 'dead', 'cancelled') AS settled_meanwhile
       FROM (SELECT id, status, result, last_error, awaited IS TRUE AS awaited FROM ${names.jobs} WHERE id = $1
             UNION ALL
             SELECT id, status, result, last_error, true FROM ${names.archive} WHERE id = $1) r`,
    );
    this.#states = names.statement('awaited_states', read('$1::bigint[]'));
  }

  /**
   * Marks job `id` as awaited and returns where it stands; undefined when no
   * such job exists (in the jobs table or the archive). `settledMeanwhile`:
   * the job ended while this statement waited for its row, and must be read
   * again.
   *
   * @throws {DatabaseError} from the database.
   */
  async watch(
    db: Queryable,
    id: string,
  ): Promise<(AwaitedState & { settledMeanwhile: boolean }) | undefined> {
    const { rows } = await run<Row & { settled_meanwhile: boolean }>(db, this.#watch, [id]);
    return rows[0] && { ...toState(rows[0]), settledMeanwhile: rows[0].settled_meanwhile };
  }

  /**
   * Where jobs `ids` stand; a job in neither table is absent.
   *
   * @throws {DatabaseError} from the database.
   */
  async states(db: Queryable, ids: readonly string[]): Promise<AwaitedState[]> {
    const { rows } = await run<Row>(db, this.#states, [ids]);
    return rows.map(toState);
  }
}

function toState(r: Row): AwaitedState {
  return { id: r.id, status: r.status, result: r.result, lastError: r.last_error };
}
