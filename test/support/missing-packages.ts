/**
 * Helpers for the tests of skiplock without its optional packages: a child
 * process (test/processes/without-*.ts) where some packages cannot be found
 * reports how each feature fails, and the test compares that report.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const HIDE = fileURLToPath(new URL('./hide-packages.mjs', import.meta.url));

/** The MissingDependencyError expected for `packageName`, needed by `neededFor`. */
export function missing(packageName: string, neededFor: string) {
  return {
    name: 'MissingDependencyError',
    code: 'MISSING_DEPENDENCY',
    packageName,
    message: `${neededFor} needs the package '${packageName}': npm install ${packageName}`,
  };
}

/** What a child process reports of an error: its name, code, package name and message. */
export function failureReport(error: unknown) {
  return {
    name: (error as Error).name,
    code: (error as { code?: unknown }).code,
    packageName: (error as { packageName?: unknown }).packageName,
    message: (error as Error).message,
  };
}

/**
 * Runs the process `script` (a path under test/, e.g. `processes/without-optional-packages.ts`)
 * with the packages `hidden` made unfindable, and resolves with the report it sends;
 * rejects if it exits without one.
 */
export async function reportWithout(script: string, hidden: string[]): Promise<Record<string, unknown>> {
  const child = fork(fileURLToPath(new URL(`../${script}`, import.meta.url)), [], {
    execArgv: ['--import', 'tsx', '--import', HIDE],
    env: { ...process.env, SKIPLOCK_TEST_HIDE: hidden.join(',') },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [report] = (await Promise.race([
    once(child, 'message'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the process exited (${String(code)}) without a report`);
    }),
  ])) as [Record<string, unknown>];
  return report;
}
