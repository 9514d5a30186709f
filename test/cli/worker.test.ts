import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';
import { type CliProcess, runCli, spawnCli } from './cli-process.js';

const t = useTestDatabase();
let scratch: string;

/** A password in every URL the CLI gets: the suite's server accepts any, and no output may show it. */
const PASSWORD = 'cli-s3cret-pw';

/** The test's database (with PASSWORD) and schema, as flags. */
function conn(): string[] {
  const url = new URL(t.db.url);
  url.password = PASSWORD;
  return ['--database-url', url.toString(), '--schema', t.schema];
}

/** Flags of every CLI worker here: a short poll, every state change logged. */
const fast = ['--poll-interval-ms', '200', '--log-level', 'debug'];

/** A CLI worker process, ended (SIGKILL) after the test if the test did not end it. */
function worker(args: string[], env: Record<string, string> = {}): CliProcess {
  const run = spawnCli(['worker', ...args, ...fast, ...conn()], { env });
  t.defer(async () => {
    if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL');
    await run.exited;
  });
  return run;
}

/** The connection line every command prints: the database, password masked. */
function expectMasked(output: string) {
  expect(output).toMatch(/skiplock: database postgres:\/\/postgres:\*\*\*\*@127\.0\.0\.1:\d+\//);
  expect(output).not.toContain(PASSWORD);
}

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'skiplock-cli-worker-'));
});
afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

describe('skiplock worker', () => {
  it('runs enqueued jobs with the handlers of an ES module (a batch handler too), logging each state change', async () => {
    const echoFile = join(scratch, 'echo.txt');
    const batch = (
      await t.skiplock.enqueueMany(
        [1, 2].map((n) => ({ kind: 'echo_batch', payload: { n }, queue: 'cli-a' })),
      )
    ).map((j) => j.id);
    const enqueued = await runCli([
      'enqueue',
      'echo',
      '{"hello": "world"}',
      '--queue',
      'cli-a',
      '--json',
      ...conn(),
    ]);
    expect(enqueued.code, enqueued.stderr).toBe(0);
    const { id } = JSON.parse(enqueued.stdout);
    const run = worker(
      ['--handlers', 'test/cli/fixtures/handlers.mjs', '--queue', 'cli-a', '--on-success', 'keep'],
      {
        ECHO_FILE: echoFile,
      },
    );
    try {
      await waitFor(
        async () =>
          (
            await t.query(
              `SELECT count(*)::int AS n FROM ${t.jobs} WHERE id = ANY($1::bigint[]) AND status = 'succeeded'`,
              [[id, ...batch]],
            )
          )[0]?.n === 3,
        30_000,
        'the jobs to succeed',
      );
      expect(readFileSync(echoFile, 'utf8').split('\n').sort()).toEqual([
        '',
        '{"hello":"world"}',
        '{"n":1}',
        '{"n":2}',
      ]);
      const logged = () =>
        run
          .stdout()
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as { msg: string; level: number; jobId?: string });
      const lineOf = (msg: string) => logged().find((l) => l.msg === msg && l.jobId === id);
      await waitFor(() => lineOf('job succeeded'), 10_000, 'the job’s success to be logged');
      const started = lineOf('job started');
      const succeeded = lineOf('job succeeded');
      expect([started?.level, succeeded?.level]).toEqual([30, 20]);
      // The database it uses is named with the password masked, and the password is nowhere else.
      expectMasked(run.stderr());
      expect(run.stdout()).not.toContain(PASSWORD);
    } finally {
      run.child.kill('SIGTERM');
    }
    expect(await run.exited).toBe(0);
  }, 120_000);

  it('loads a TypeScript handlers file and logs a failure with its outcome', async () => {
    const run = worker(['--handlers', 'test/cli/fixtures/handlers-ts.ts', '--queue', 'cli-ts']);
    try {
      await run.waitForOutput(/worker started/);
      const ok = await runCli(['enqueue', 'typed', '{"n": 1}', '--queue', 'cli-ts', '--json', ...conn()]);
      const bad = await runCli([
        'enqueue',
        'typed',
        '{"n": "x"}',
        '--queue',
        'cli-ts',
        '--max-attempts',
        '1',
        '--json',
        ...conn(),
      ]);
      expectMasked(ok.stderr);
      await run.waitForOutput(/"msg":"job dead: out of attempts/);
      const [row] = await t.query(`SELECT status, last_error FROM ${t.jobs} WHERE id = $1`, [
        JSON.parse(bad.stdout).id,
      ]);
      expect(row).toMatchObject({ status: 'dead', last_error: expect.stringMatching(/n must be a number/) });
      await waitFor(
        async () =>
          (await t.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1`, [JSON.parse(ok.stdout).id])).length === 0,
        10_000,
        'the good job to be deleted on success',
      );
    } finally {
      run.child.kill('SIGINT');
    }
    expect(await run.exited).toBe(0);
  }, 120_000);

  it('stops gracefully on SIGTERM: exit 0, the running job released without charging the attempt', async () => {
    const run = worker([
      '--handlers',
      'test/cli/fixtures/handlers.mjs',
      '--queue',
      'cli-slow',
      '--shutdown-timeout-ms',
      '300',
    ]);
    await run.waitForOutput(/worker started/);
    const enqueued = await runCli(['enqueue', 'slow', '--queue', 'cli-slow', '--json', ...conn()]);
    const { id } = JSON.parse(enqueued.stdout);
    await run.waitForOutput(/"msg":"job started"/);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
    expect(run.stdout()).toMatch(/"msg":"job released on shutdown/);
    expect(run.stdout()).toMatch(/"msg":"worker stopped"/);
    const [row] = await t.query(`SELECT status, attempts, locked_by FROM ${t.jobs} WHERE id = $1`, [id]);
    expect(row).toEqual({ status: 'queued', attempts: 0, locked_by: null });
  }, 120_000);

  it('ignores the same signal twice at once, and exits 1 at a second one a second later', async () => {
    const run = worker(['--handlers', 'test/cli/fixtures/handlers.mjs', '--queue', 'cli-insist']);
    await run.waitForOutput(/worker started/);
    await runCli(['enqueue', 'slow', '--queue', 'cli-insist', ...conn()]);
    await run.waitForOutput(/"msg":"job started"/);
    // As a terminal sends it to the process and to its group: the stop waits for the slow job.
    run.child.kill('SIGTERM');
    run.child.kill('SIGTERM');
    const firstAt = Date.now();
    await run.waitForOutput(/"msg":"stopping: no new claims/);
    await waitFor(() => Date.now() - firstAt >= 1_200, 5_000, 'a second to pass');
    expect(run.child.exitCode).toBeNull();
    run.child.kill('SIGINT');
    expect(await run.exited).toBe(1);
    expect(run.stdout().match(/"msg":"stopping: no new claims/g)).toHaveLength(1);
    expect(run.stdout()).toMatch(
      /"msg":"second signal: exiting now; running jobs come back after the visibility timeout"/,
    );
  }, 120_000);

  it('takes the pooler flags: no LISTEN, unnamed claims, no session settings; a direct LISTEN URL is masked', async () => {
    const direct = new URL(t.db.url);
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
      ...conn(),
    ]);
    const polling = spawnCli([
      'worker',
      '--handlers',
      'test/cli/fixtures/handlers.mjs',
      '--queue',
      'cli-pooler-poll',
      '--no-listen',
      ...fast,
      ...conn(),
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
      // The first line names the kinds loaded, not an empty `"handlers":{}`.
      expect(started(worker)).toMatchObject({ kinds: ['echo', 'slow', 'boom', 'echo_batch'] });
      expect(started(worker)).not.toHaveProperty('handlers');
      expect(started(worker).msg).toBe(
        'worker started on queues cli-pooler for kinds echo, slow, boom, echo_batch',
      );
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
        ...conn(),
      ]);
      const { id } = JSON.parse(enqueued.stdout);
      await waitFor(
        async () => (await t.query(`SELECT 1 FROM ${t.jobs} WHERE id = $1`, [id])).length === 0,
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
