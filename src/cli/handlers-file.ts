/**
 * Loads the module given to `skiplock worker --handlers FILE`: an ES module
 * (`.js`, `.mjs`) or TypeScript (`.ts`, `.mts`, through the optional package
 * `tsx`), whose default export maps kinds to handlers (functions, or definitions
 * `{ handle, maxAttempts, timeoutMs, backoff }`, or `{ transactional: true, handle }`).
 */
import { accessSync, constants, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { importOptional, MissingDependencyError } from '../optional-dependency.js';
import type { HandlerEntry } from '../worker/handler-definition.js';
import { UsageError } from './usage-error.js';

/** Handlers by kind, as loaded from a file. */
export type LoadedHandlers = Record<string, HandlerEntry<string, unknown>>;

/**
 * Imports `file` (relative to the working directory) and returns its default
 * export, checked to be an object of handlers.
 *
 * @throws {UsageError} naming the file when it is missing or unreadable, fails
 *   to import (syntax error, a throwing top level), or has no such default export.
 * @throws {MissingDependencyError} for a TypeScript file when `tsx` is not installed.
 */
export async function loadHandlersFile(file: string): Promise<LoadedHandlers> {
  const path = resolve(file);
  const fail = (reason: string, cause?: unknown): never => {
    throw new UsageError(`cannot load handlers file ${file}: ${reason}`, { cause });
  };
  try {
    accessSync(path, constants.R_OK);
    if (!statSync(path).isFile()) fail('not a file');
  } catch (error) {
    if (error instanceof UsageError) throw error;
    fail((error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : 'not readable', error);
  }
  let mod: { default?: unknown };
  try {
    mod = await importModule(path);
  } catch (error) {
    // A missing tsx is reported as every missing optional package is (one line, exit 1).
    if (error instanceof MissingDependencyError) throw error;
    return fail(error instanceof Error ? error.message.split('\n', 1)[0]! : String(error), error);
  }
  let handlers = mod.default;
  // A .ts file outside an ESM package is compiled as CommonJS: its exports arrive wrapped once more.
  const inner = (handlers as { default?: unknown } | undefined)?.default;
  if (typeof inner === 'object' && inner !== null) handlers = inner;
  if (typeof handlers !== 'object' || handlers === null || Array.isArray(handlers)) {
    return fail('its default export must be an object mapping kinds to handler functions');
  }
  const kinds = Object.entries(handlers);
  if (kinds.length === 0)
    fail('its default export has no handlers (use --maintenance-only for a worker that runs no jobs)');
  for (const [kind, handler] of kinds) {
    const definition = handler as { handle?: unknown; handleBatch?: unknown } | null;
    if (
      typeof handler !== 'function' &&
      (typeof definition !== 'object' ||
        definition === null ||
        (typeof definition.handle !== 'function' && typeof definition.handleBatch !== 'function'))
    )
      fail(
        `the handler of kind ${JSON.stringify(kind)} is neither a function nor { handle, … } nor { handleBatch, … }`,
      );
  }
  return handlers as LoadedHandlers;
}

async function importModule(path: string): Promise<{ default?: unknown }> {
  const url = pathToFileURL(path).href;
  try {
    return (await import(url)) as { default?: unknown };
  } catch (error) {
    // Plain Node cannot load TypeScript: go through tsx. Under tsx already, the first import worked,
    // and the handlers share this process's module instances (PermanentError stays one class).
    if ((error as NodeJS.ErrnoException).code !== 'ERR_UNKNOWN_FILE_EXTENSION') throw error;
    const { tsImport } = await importOptional<typeof import('tsx/esm/api')>('tsx/esm/api', {
      packageName: 'tsx',
      neededFor: 'a TypeScript handlers file',
      alternative: 'compile it to JavaScript',
    });
    return (await tsImport(url, import.meta.url)) as { default?: unknown };
  }
}
