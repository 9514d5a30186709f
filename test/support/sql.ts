/** Identifiers in tests' ad-hoc SQL (no vitest here: child processes import it too). */

/** Quotes an identifier (always quoted, `"` doubled). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The schema-qualified name of a table: the schema quoted, the table a plain lower-case name. */
export function tableIn(schema: string, table: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(table)) throw new Error(`not a plain table name: ${table}`);
  return `${quoteIdent(schema)}.${table}`;
}
