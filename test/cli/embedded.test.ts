import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations } from '../../src/migrations/migrator.js';
import { waitFor } from '../support/database.js';
import { runCli, spawnCli } from './cli-process.js';

const LATEST = loadMigrations().at(-1)?.version;

// Without --database-url or DATABASE_URL, commands share one embedded server under ./.skiplock.
let cwd: string;
const pidFile = () => join(cwd, '.skiplock', 'data', 'postmaster.pid');
const serverPid = () => Number(readFileSync(pidFile(), 'utf8').split('\n')[0]);

beforeAll(() => {
  cwd = mkdtempSync(join(tmpdir(), 'skiplock-cli-embedded-'));
  // As root, the server runs as `postgres`, which must be able to enter the folder (mkdtemp makes it 0700).
  chmodSync(cwd, 0o755);
});
afterAll(async () => {
  if (existsSync(pidFile())) await runCli(['dev', '--stop', '--force'], { cwd });
  rmSync(cwd, { recursive: true, force: true });
});

describe('the embedded PostgreSQL', () => {
  it('is shared by concurrent processes, stopped by the last one, and keeps its data', async () => {
    // Two processes in a fresh folder at once: one initialises and starts the server, under the lock.
    const [first, second] = await Promise.all([
      runCli(['migrate'], { cwd, timeoutMs: 120_000 }),
      runCli(['migrate'], { cwd, timeoutMs: 120_000 }),
    ]);
    expect(first!.code, first!.stderr).toBe(0);
    expect(second!.code, second!.stderr).toBe(0);
    expect(`${first!.stdout}${second!.stdout}`).toContain(`migrated to version ${LATEST}`);
    expect(`${first!.stdout}${second!.stdout}`).toMatch(/up to date/);
    // Both left: the last one stopped the server.
    expect(existsSync(pidFile())).toBe(false);

    const dev = spawnCli(['dev'], { cwd });
    await dev.waitForOutput(/^postgres:\/\/postgres:\*\*\*\*@127\.0\.0\.1:\d+\/postgres$/m, 90_000);
    expect(dev.stderr()).toMatch(/embedded PostgreSQL started/);
    const pid = serverPid();

    // A second process joins the running server instead of starting another.
    const migrated = await runCli(['migrate', '--json'], { cwd });
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(migrated.stderr).toMatch(/embedded PostgreSQL, data in .*\.skiplock, already running/);
    expect(migrated.stderr).not.toMatch(/:[^*@/]+@127/); // password masked
    const enqueued = await runCli(['enqueue', 'persisted', '--json'], { cwd });
    expect(enqueued.code, enqueued.stderr).toBe(0);
    // They left, but `dev` still uses the server.
    expect(serverPid()).toBe(pid);
    expect(existsSync(pidFile())).toBe(true);

    // The last process to leave stops it.
    dev.child.kill('SIGINT');
    expect(await dev.exited).toBe(0);
    await waitFor(() => !existsSync(pidFile()), 30_000, 'the server to stop');

    // A later command starts it again on the same data.
    const listed = await runCli(['jobs', '--json'], { cwd, timeoutMs: 120_000 });
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stderr).toMatch(/started\)/);
    expect(JSON.parse(listed.stdout).map((j: { kind: string }) => j.kind)).toEqual(['persisted']);
    expect(existsSync(pidFile())).toBe(false);
  }, 300_000);

  it('says a command fell back to it, pointing at a misspelled DATABASE_URL; `dev --stop` refuses while others use it', async () => {
    const dev = spawnCli(['dev'], { cwd });
    try {
      await dev.waitForOutput(/^postgres:\/\/postgres:\*\*\*\*@127\.0\.0\.1:\d+\/postgres$/m, 90_000);
      const pid = serverPid();
      const misspelled = await runCli(['migrate'], {
        cwd,
        env: { DATABSE_URL: 'postgres://app:secret@db.internal/app' },
      });
      expect(misspelled.code, misspelled.stderr).toBe(0);
      expect(misspelled.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          /^skiplock: database postgres:\/\/postgres:\*\*\*\*@127\.0\.0\.1:\d+\/postgres \(embedded PostgreSQL, data in \S*\.skiplock, already running\): no --database-url or DATABASE_URL set; DATABSE_URL holds a postgres:\/\/ URL: did you mean DATABASE_URL\?$/,
        ),
      ]);
      expect(misspelled.stderr).not.toContain('secret');

      const refused = await runCli(['dev', '--stop'], { cwd });
      expect(refused.code, refused.stderr).toBe(1);
      expect(refused.stderr.trim()).toBe(
        `skiplock: error: the embedded PostgreSQL is in use by 1 other process (pid ${dev.child.pid}): stop them first, or add --force`,
      );
      expect(serverPid()).toBe(pid);
      const forced = await runCli(['dev', '--stop', '--force'], { cwd });
      expect(forced.code, forced.stderr).toBe(0);
      expect(forced.stdout.trim()).toBe('embedded PostgreSQL stopped');
      await waitFor(() => !existsSync(pidFile()), 30_000, 'the server to stop');
    } finally {
      dev.child.kill('SIGKILL');
      await dev.exited;
    }
  }, 300_000);

  it('a dashboard whose embedded server went away reconnects to the next one', async () => {
    expect((await runCli(['migrate'], { cwd, timeoutMs: 120_000 })).code).toBe(0);
    const dashboard = spawnCli(['dashboard', '--port', '0'], { cwd });
    try {
      await dashboard.waitForOutput(/dashboard at http:\/\/\S+/, 90_000);
      const url = /dashboard at (http:\/\/\S+)/.exec(dashboard.stdout())![1]!;
      const status = async () => (await fetch(url).catch(() => undefined))?.status;
      expect(await status()).toBe(200);
      const stopped = await runCli(['dev', '--stop', '--force'], { cwd });
      expect(stopped.code, stopped.stderr).toBe(0);
      await waitFor(() => !existsSync(pidFile()), 30_000, 'the server to stop');
      expect(await status()).toBe(500);
      // The next command starts the server again, on the port it had.
      const stats = await runCli(['stats'], { cwd, timeoutMs: 120_000 });
      expect(stats.code, stats.stderr).toBe(0);
      expect(stats.stderr).toMatch(/started\)/);
      await waitFor(async () => (await status()) === 200, 30_000, 'the dashboard to answer again');
    } finally {
      dashboard.child.kill('SIGTERM');
      await dashboard.exited;
    }
  }, 300_000);
});
