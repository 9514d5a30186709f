/**
 * Server settings that defeat the jobs table's design, checked once when a
 * worker starts, so the operator hears of them in words.
 */
import type pg from 'pg';

/**
 * Warnings about the server's settings; none when all is well or when the
 * check itself fails (the worker's loops report real database errors).
 */
export async function serverWarnings(pool: Pick<pg.Pool, 'query'>): Promise<string[]> {
  try {
    const { rows } = await pool.query<{ autovacuum: string }>(
      "SELECT pg_catalog.current_setting('autovacuum') AS autovacuum",
    );
    if (rows[0]?.autovacuum === 'off') {
      return [
        'the server runs with autovacuum = off: the jobs table’s autovacuum settings do nothing, and dead rows of finished jobs pile up; turn autovacuum on',
      ];
    }
  } catch {
    // Only warnings.
  }
  return [];
}

/** The warning for a LISTEN connection that did not hear its own probe. */
export function deafListenerWarning(timeoutMs: number, pollIntervalMs: number): string {
  return `the LISTEN connection did not hear its own probe within ${timeoutMs} ms, so wake-ups are not arriving (a half-open connection, or LISTEN through a transaction pooler such as PgBouncer: give listenConnectionString a direct URL, or set listen: false); replacing it, and polling every ${pollIntervalMs} ms meanwhile`;
}
