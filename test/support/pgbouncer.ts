/**
 * A real PgBouncer (Debian's `pgbouncer` package) in transaction pool mode in
 * front of the suite's server, for one test file: its config and user list in
 * a temporary folder, on a free port, run as `postgres` when the tests run as
 * root (PgBouncer refuses root).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort, postgresUser } from '../../src/cli/postgres-programs.js';
import { adminUrl } from './database.js';

/** A running PgBouncer. */
export interface PgBouncer {
  /** A URL for `database` through PgBouncer. */
  urlFor(database: string): string;
  /** The lines PgBouncer logged so far. */
  log(): string;
  stop(): Promise<void>;
}

/** The pgbouncer program, or undefined when it is not installed. */
export function findPgBouncer(): string | undefined {
  for (const candidate of ['pgbouncer', '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer']) {
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' });
      return candidate;
    } catch {}
  }
  return undefined;
}

/** Starts PgBouncer in transaction mode, every database forwarded to the suite's server. */
export async function startPgBouncer(program: string): Promise<PgBouncer> {
  const server = new URL(adminUrl());
  const user = decodeURIComponent(server.username || 'postgres');
  const runAs = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pgbouncer-'));
  const port = await freePort();
  const logFile = join(dir, 'pgbouncer.log');
  writeFileSync(join(dir, 'userlist.txt'), `"${user}" ""\n`);
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 10',
      'max_client_conn = 500',
      `logfile = ${logFile}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  for (const file of ['userlist.txt', 'pgbouncer.ini']) {
    if (runAs) chownSync(join(dir, file), runAs.uid, runAs.gid);
  }
  const child: ChildProcess = spawn(program, [join(dir, 'pgbouncer.ini')], {
    stdio: 'ignore',
    ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const urlFor = (database: string) => {
    const url = new URL(adminUrl());
    url.host = `127.0.0.1:${port}`;
    url.pathname = `/${database}`;
    return url.toString();
  };
  const log = () => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  const stop = async () => {
    child.kill('SIGINT');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const client = new pg.Client({ connectionString: urlFor(server.pathname.slice(1) || 'postgres') });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      break;
    } catch (error) {
      await client.end().catch(() => {});
      if (child.exitCode !== null || Date.now() > deadline) {
        const logged = log();
        await stop();
        throw new Error(`PgBouncer did not start: ${String(error)}\n${logged}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { urlFor, log, stop };
}
