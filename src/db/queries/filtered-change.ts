/**
 * A change to every job a {@link JobFilter} matches (cancel, requeue): the
 * filter's conditions in SQL and the values they read, kept in one place so
 * that the statements and their parameters agree on positions.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { JobFilter } from './inspect.js';
import type { SchemaNames } from './schema-names.js';

/**
 * SQL conditions true when the jobs row `j` matches every field of the filter
 * that was given: $2 ids, $3 kinds, $4 queues, $6 tags (a job having every
 * one); a null parameter matches every job. Statuses ($1) are each
 * statement's own, for each has its own default.
 */
export const FILTER_MATCH = `($2::bigint[] IS NULL OR j.id = ANY($2::bigint[]))
           AND ($3::text[] IS NULL OR j.kind = ANY($3::text[]))
           AND ($4::text[] IS NULL OR j.queue = ANY($4::text[]))
           AND ($6::text[] IS NULL OR j.tags @> $6::text[])`;

/**
 * One statement that changes every job a filter matches, bound to the
 * schema's channel, which its notification goes to. Its parameters: $1
 * statuses, $2 ids, $3 kinds, $4 queues, $5 the channel, $6 tags; null for a
 * field not given.
 */
export class FilteredChange {
  readonly #statement: Statement;
  readonly #channel: string;

  /** `name` and `text` as for {@link SchemaNames.statement}; `text` reads the filter through {@link FILTER_MATCH}. */
  constructor(names: SchemaNames, name: string, text: string) {
    this.#statement = names.statement(name, text);
    this.#channel = names.channel;
  }

  /**
   * Runs the change for `filter`; returns the statement's rows.
   *
   * @throws {DatabaseError} from the database.
   */
  async run<Row>(db: Queryable, filter: JobFilter): Promise<Row[]> {
    const { rows } = await run<Row>(db, this.#statement, [
      filter.status ?? null,
      filter.ids ?? null,
      filter.kind ?? null,
      filter.queue ?? null,
      this.#channel,
      filter.tags ?? null,
    ]);
    return rows;
  }
}
