/** A connection of a test's own, beside the pool: a transaction held open, a second session. */
import pg from 'pg';

/** Runs `fn` with a connected client on `url` and ends the client after, passed or failed. */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
