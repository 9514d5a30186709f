/**
 * Where a job stands once no transaction is writing it: read after a COMMIT
 * whose answer was lost, while that COMMIT may still be running on the server.
 * A plain read would see the row as the commit left it so far (still running);
 * this one waits for the row's lock, so it sees the outcome.
 */
import type pg from 'pg';
import { run, type Statement } from '../executor.js';
import type { LeaseState } from './results.js';
import type { SchemaNames } from './schema-names.js';

/** The settled-lease read. */
export class SettledLeaseQueries {
  readonly #read: Statement;

  constructor(names: SchemaNames) {
    // FOR SHARE waits for a transaction that updated or deleted the row, then reads what it committed.
    this.#read = names.statement(
      'settled_lease_state',
      `SELECT id, lease_seq, status, locked_by, queue,
              GREATEST(0, EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS retry_delay_ms
       FROM ${names.jobs} WHERE id = $1 FOR SHARE`,
    );
  }

  /**
   * Where job `id` stands after any transaction writing its row ended;
   * undefined when the row is gone.
   *
   * @throws {DatabaseError} from the database (the statement may wait for a lock up to the pool's deadline).
   */
  async settledState(pool: Pick<pg.Pool, 'query'>, id: string): Promise<LeaseState | undefined> {
    const { rows } = await run<{
      id: string;
      lease_seq: string;
      status: LeaseState['status'];
      locked_by: string | null;
      queue: string;
      retry_delay_ms: number;
    }>(pool, this.#read, [id]);
    const r = rows[0];
    return (
      r && {
        id: r.id,
        leaseSeq: r.lease_seq,
        status: r.status,
        lockedBy: r.locked_by,
        queue: r.queue,
        retryDelayMs: r.retry_delay_ms,
      }
    );
  }
}
