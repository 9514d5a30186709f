/**
 * Fresh databases for each system and scenario on the benchmark server, and
 * the queries the report needs about the server itself.
 */
import pg from 'pg';

/** A URL with its database name replaced. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** Runs one statement on a short-lived connection to `url`. */
export async function adminQuery<Row extends pg.QueryResultRow = pg.QueryResultRow>(
  url: string,
  text: string,
  values: unknown[] = [],
): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Row>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * Creates an empty database named after `namespace` and returns its URL.
 * The name is made of `[a-z0-9_]` by the caller, so quoting it is enough.
 */
export async function createDatabase(serverUrl: string, namespace: string): Promise<string> {
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS "${namespace}" WITH (FORCE)`);
  await adminQuery(serverUrl, `CREATE DATABASE "${namespace}"`);
  return withDatabase(serverUrl, namespace);
}

/** Drops a database made by {@link createDatabase}, closing whatever is still connected. */
export async function dropDatabase(serverUrl: string, namespace: string): Promise<void> {
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS "${namespace}" WITH (FORCE)`);
}

/**
 * Drops leftovers of interrupted earlier runs: databases named `skbench_…_<pid>_<n>`
 * whose process is gone (a benchmark running beside this one keeps its own).
 */
export async function dropLeftovers(serverUrl: string): Promise<void> {
  const rows = await adminQuery<{ datname: string }>(
    serverUrl,
    "SELECT datname FROM pg_database WHERE datname LIKE 'skbench\\_%'",
  );
  for (const { datname } of rows) {
    const pid = Number(/_(\d+)_\d+$/.exec(datname)?.[1]);
    if (Number.isInteger(pid) && isAlive(pid)) continue;
    await dropDatabase(serverUrl, datname);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Size (table, indexes, TOAST) and dead tuples of one table, summed over its
 * partitions when it is partitioned (pg-boss).
 */
export async function relationStats(
  url: string,
  table: string,
): Promise<{ bytes: number; deadTuples: number } | undefined> {
  const rows = await adminQuery<{ bytes: string | null; dead: string | null }>(
    url,
    `SELECT sum(pg_total_relation_size(t.relid))::text AS bytes, sum(s.n_dead_tup)::text AS dead
     FROM (SELECT relid FROM pg_partition_tree(to_regclass($1)) WHERE isleaf
           UNION SELECT to_regclass($1)) t
     LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid`,
    [table],
  );
  const row = rows[0];
  if (!row || row.bytes === null) return undefined;
  return { bytes: Number(row.bytes), deadTuples: Number(row.dead ?? 0) };
}
