/**
 * Where a job stands once no transaction is writing it: read after a COMMIT
 * whose answer was lost, while that COMMIT may still be running on the server.
 * A plain read would see the row as the commit left it so far (still running);
 * this one waits for the row's lock, so it sees the outcome.
 */
import type pg from 'pg';
import { run, type Statement } from '../executor.js';
import { LEASE_STATE_COLUMNS, type LeaseState, type LeaseStateRow, leaseStateOf } from './results.js';
import type { SchemaNames } from './schema-names.js';

/** The settled-lease read. */
export class SettledLeaseQueries {
  readonly #read: Statement;

  constructor(names: SchemaNames) {
    // FOR SHARE waits for a transaction that updated or deleted the row, then reads what it committed.
    this.#read = names.statement(
      'settled_lease_state',
      `SELECT ${LEASE_STATE_COLUMNS} FROM ${names.jobs} WHERE id = $1 FOR SHARE`,
    );
  }

  /**
   * Where job `id` stands after any transaction writing its row ended;
   * undefined when the row is gone.
   *
   * @throws {DatabaseError} from the database (the statement may wait for a lock up to the pool's deadline).
   */
  async settledState(pool: Pick<pg.Pool, 'query'>, id: string): Promise<LeaseState | undefined> {
    const { rows } = await run<LeaseStateRow>(pool, this.#read, [id]);
    return rows[0] && leaseStateOf(rows[0]);
  }
}
