/**
 * A missing optional package fails the feature that needs it with one error
 * class, MissingDependencyError, naming the package and its install command.
 * (Tracing's own case is in tracing.test.ts; the command line's in test/cli.)
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const HIDE = fileURLToPath(new URL('./support/hide-packages.mjs', import.meta.url));

function missing(packageName: string, neededFor: string) {
  return {
    name: 'MissingDependencyError',
    code: 'MISSING_DEPENDENCY',
    packageName,
    message: `${neededFor} needs the package '${packageName}': npm install ${packageName}`,
  };
}

describe('without the optional packages installed', () => {
  it('metrics and the Kysely and Drizzle adapters fail with a MissingDependencyError naming the package', async () => {
    const child = fork(
      fileURLToPath(new URL('./processes/without-optional-packages.ts', import.meta.url)),
      [],
      {
        execArgv: ['--import', 'tsx', '--import', HIDE],
        env: { ...process.env, SKIPLOCK_TEST_HIDE: 'prom-client,kysely,drizzle-orm' },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      },
    );
    const [report] = (await Promise.race([
      once(child, 'message'),
      once(child, 'exit').then(([code]) => {
        throw new Error(`the process exited (${String(code)}) without a report`);
      }),
    ])) as [Record<string, unknown>];
    expect(report).toEqual({
      metrics: missing('prom-client', 'skiplock metrics'),
      kysely: missing('kysely', 'skiplock/kysely'),
      drizzle: missing('drizzle-orm', 'skiplock/drizzle'),
    });
  });
});
