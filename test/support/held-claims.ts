/**
 * Holds a worker's claims mid-statement: a trigger on the test's jobs table
 * makes every update to `running` (of jobs of kind `held` only, when asked)
 * wait for an advisory lock that the test holds, so a claim stays in flight
 * until the test lets it go.
 */
import { quoteIdent } from '../../src/db/sql.js';
import { waitForBlockedBy } from './database.js';
import type { TestContext } from './fixture.js';

/** A claim hold: `blocked()` resolves once a claim waits on it; `release()` lets every claim go. */
export interface HeldClaims {
  blocked(): Promise<void>;
  release(): Promise<unknown>;
}

/**
 * Holds the claims of test `t` (of jobs of kind `held` with `onlyHeld`, else
 * of every job) on advisory lock `key` (an integer constant of the test),
 * taken on a connection of the file's pool that goes back to it, unlocked,
 * after the test.
 */
export async function holdClaims(t: TestContext, key: number, onlyHeld = false): Promise<HeldClaims> {
  if (!Number.isSafeInteger(key)) throw new Error(`advisory lock key ${key}: not an integer`);
  const holdClaim = `${quoteIdent(t.schema)}.hold_claim`;
  await t.query(`CREATE FUNCTION ${holdClaim}() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM pg_advisory_lock_shared(${key}); PERFORM pg_advisory_unlock_shared(${key}); RETURN NEW; END $$`);
  const ofKind = onlyHeld ? " AND NEW.kind = 'held'" : '';
  await t.query(
    `CREATE TRIGGER hold_claim BEFORE UPDATE ON ${t.jobs} FOR EACH ROW
     WHEN (NEW.status = 'running'${ofKind}) EXECUTE FUNCTION ${holdClaim}()`,
  );
  const holder = await t.db.pool.connect();
  // Back to the pool without the lock, whatever the test did.
  t.defer(async () => {
    try {
      await holder.query('SELECT pg_advisory_unlock_all()');
    } finally {
      holder.release();
    }
  });
  const { rows } = await holder.query<{ pid: number }>(
    'SELECT pg_advisory_lock($1), pg_backend_pid() AS pid',
    [key],
  );
  return {
    blocked: () => waitForBlockedBy(t.db.pool, rows[0]!.pid, 'a claim waiting on the advisory lock'),
    release: () => holder.query('SELECT pg_advisory_unlock_all()'),
  };
}
