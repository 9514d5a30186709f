import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase, waitFor } from '../support/database.js';
import { runCli, spawnCli } from './cli-process.js';

let db: TestDatabase;
let conn: string[];
let scratch: string;

beforeAll(async () => {
  db = await createTestDatabase();
  conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];
  scratch = mkdtempSync(join(tmpdir(), 'skiplock-cli-worker-'));
});
afterAll(async () => {
  await db?.close();
  rmSync(scratch, { recursive: true, force: true });
});

const fast = ['--poll-interval-ms', '200', '--log-level', 'debug'];

describe('skiplock worker', () => {
  it('runs enqueued jobs with the handlers of an ES module, logging each state change', async () => {
    const echoFile = join(scratch, 'echo.txt');
    const enqueued = await runCli([
      'enqueue',
      'echo',
      '{"hello": "world"}',
      '--queue',
      'cli-a',
      '--json',
      ...conn,
    ]);
    expect(enqueued.code, enqueued.stderr).toBe(0);
    const { id } = JSON.parse(enqueued.stdout);
    const worker = spawnCli(
      [
        'worker',
        '--handlers',
        'test/cli/fixtures/handlers.mjs',
        '--queue',
        'cli-a',
        '--on-success',
        'keep',
        ...fast,
        ...conn,
      ],
      { env: { ECHO_FILE: echoFile } },
    );
    try {
      await waitFor(
        async () =>
          (await db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [id]))[0]?.status === 'succeeded',
        30_000,
        'the job to succeed',
      );
      expect(readFileSync(echoFile, 'utf8')).toBe('{"hello":"world"}\n');
      await worker.waitForOutput(/"msg":"job succeeded"/);
      const lines = worker
        .stdout()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { msg: string; level: number; jobId?: string });
      expect(lines.find((l) => l.msg === 'job started')).toMatchObject({ level: 30, jobId: id });
      expect(lines.find((l) => l.msg === 'job succeeded')).toMatchObject({ level: 20, jobId: id });
      // Passwords never reach the log.
      const password = decodeURIComponent(new URL(db.url).password);
      expect(worker.stdout() + worker.stderr()).not.toContain(`:${password}@`);
    } finally {
      worker.child.kill('SIGTERM');
      expect(await worker.exited).toBe(0);
    }
  });

  it('loads a TypeScript handlers file and logs a failure with its outcome', async () => {
    const worker = spawnCli([
      'worker',
      '--handlers',
      'test/cli/fixtures/handlers-ts.ts',
      '--queue',
      'cli-ts',
      ...fast,
      ...conn,
    ]);
    try {
      await worker.waitForOutput(/worker started/);
      const ok = await runCli(['enqueue', 'typed', '{"n": 1}', '--queue', 'cli-ts', '--json', ...conn]);
      const bad = await runCli([
        'enqueue',
        'typed',
        '{"n": "x"}',
        '--queue',
        'cli-ts',
        '--max-attempts',
        '1',
        '--json',
        ...conn,
      ]);
      await worker.waitForOutput(/"msg":"job dead: out of attempts/);
      const [row] = await db.query(`SELECT status, last_error FROM ${db.jobs} WHERE id = $1`, [
        JSON.parse(bad.stdout).id,
      ]);
      expect(row).toMatchObject({ status: 'dead', last_error: expect.stringMatching(/n must be a number/) });
      await waitFor(
        async () =>
          (await db.query(`SELECT 1 FROM ${db.jobs} WHERE id = $1`, [JSON.parse(ok.stdout).id])).length === 0,
        10_000,
        'the good job to be deleted on success',
      );
    } finally {
      worker.child.kill('SIGINT');
      expect(await worker.exited).toBe(0);
    }
  });

  it('stops gracefully on SIGTERM: exit 0, the running job released without charging the attempt', async () => {
    const worker = spawnCli([
      'worker',
      '--handlers',
      'test/cli/fixtures/handlers.mjs',
      '--queue',
      'cli-slow',
      '--shutdown-timeout-ms',
      '300',
      ...fast,
      ...conn,
    ]);
    await worker.waitForOutput(/worker started/);
    const enqueued = await runCli(['enqueue', 'slow', '--queue', 'cli-slow', '--json', ...conn]);
    const { id } = JSON.parse(enqueued.stdout);
    await worker.waitForOutput(/"msg":"job started"/);
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    expect(worker.stdout()).toMatch(/"msg":"job released on shutdown/);
    expect(worker.stdout()).toMatch(/"msg":"worker stopped"/);
    const [row] = await db.query(`SELECT status, attempts, locked_by FROM ${db.jobs} WHERE id = $1`, [id]);
    expect(row).toEqual({ status: 'queued', attempts: 0, locked_by: null });
  });

  it('takes the pooler flags: no LISTEN, unnamed claims, no session settings; a direct LISTEN URL is masked', async () => {
    const direct = new URL(db.url);
    direct.password = 'not-logged-secret';
    const worker = spawnCli([
      'worker',
      '--handlers',
      'test/cli/fixtures/handlers.mjs',
      '--queue',
      'cli-pooler',
      '--no-prepared-statements',
      '--no-session-settings',
      '--listen-connection-string',
      direct.toString(),
      '--listen-probe-interval-ms',
      '5000',
      ...fast,
      ...conn,
    ]);
    const polling = spawnCli([
      'worker',
      '--handlers',
      'test/cli/fixtures/handlers.mjs',
      '--queue',
      'cli-pooler-poll',
      '--no-listen',
      ...fast,
      ...conn,
    ]);
    try {
      await worker.waitForOutput(/worker started/);
      await polling.waitForOutput(/worker started/);
      const started = (p: typeof worker) =>
        JSON.parse(
          p
            .stdout()
            .split('\n')
            .find((l) => l.includes('worker started'))!,
        ) as Record<string, unknown>;
      expect(started(worker)).toMatchObject({
        listen: true,
        listenProbeIntervalMs: 5000,
        preparedStatements: false,
        sessionSettings: false,
      });
      expect(started(worker).listenConnectionString).not.toContain('not-logged-secret');
      expect(worker.stdout() + worker.stderr()).not.toContain('not-logged-secret');
      expect(started(polling)).toMatchObject({
        listen: false,
        preparedStatements: true,
        sessionSettings: true,
      });
      const enqueued = await runCli([
        'enqueue',
        'echo',
        '{}',
        '--queue',
        'cli-pooler-poll',
        '--json',
        ...conn,
      ]);
      const { id } = JSON.parse(enqueued.stdout);
      await waitFor(
        async () => (await db.query(`SELECT 1 FROM ${db.jobs} WHERE id = $1`, [id])).length === 0,
        30_000,
        'the polled job to be done',
      );
    } finally {
      worker.child.kill('SIGTERM');
      polling.child.kill('SIGTERM');
      expect(await worker.exited).toBe(0);
      expect(await polling.exited).toBe(0);
    }
  });
});
