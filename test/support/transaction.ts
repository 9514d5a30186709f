import type pg from 'pg';

/** Runs `work` on a client of `pool` inside a transaction that is then rolled back: nothing it wrote commits. */
export async function rolledBack(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<unknown>,
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(client);
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
}
