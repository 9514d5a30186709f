import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadMigrations } from '../../src/migrations/migrator.js';
import { useTestDatabase } from '../support/fixture.js';
import { runCli, runCliEach } from './cli-process.js';

const t = useTestDatabase();
/** The test's database and schema, as flags. */
const conn = () => ['--database-url', t.db.url, '--schema', t.schema];

const VERSIONS = loadMigrations().map((m) => m.version);
const LATEST = VERSIONS.at(-1);

// Every test runs several CLI processes one or two at a time; each takes seconds on a loaded machine.
describe('skiplock CLI commands', { timeout: 240_000 }, () => {
  it('migrates, and a second migrate changes nothing', async () => {
    const schema = `${t.schema}_cli`;
    const first = await runCli(['migrate', '--database-url', t.db.url, '--schema', schema, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toEqual({ schema, applied: VERSIONS, version: LATEST });
    // A URL with a password (the suite's server trusts local connections, so any password works;
    // security.test.ts checks a server that requires it).
    const withPassword = new URL(t.db.url);
    withPassword.password = 's3cret-pw';
    const second = await runCli(['migrate', '--database-url', withPassword.toString(), '--schema', schema]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain(`up to date (version ${LATEST})`);
    // Which database is used goes to stderr, password masked.
    expect(second.stderr).toMatch(/skiplock: database postgres:\/\/postgres:\*\*\*\*@/);
    expect(second.stderr).not.toContain('s3cret-pw');
  });

  it('enqueues with options, then shows the job in stats and jobs (table and JSON)', async () => {
    const enqueued = await runCli([
      'enqueue',
      'send_invoice_email',
      '{"orderId": 42}',
      '--queue',
      'emails',
      '--priority',
      '5',
      '--delay-ms',
      '60000',
      '--max-attempts',
      '3',
      '--json',
      ...conn(),
    ]);
    expect(enqueued.code, enqueued.stderr).toBe(0);
    const job = JSON.parse(enqueued.stdout);
    expect(job).toMatchObject({ kind: 'send_invoice_email', queue: 'emails', priority: 5, maxAttempts: 3 });
    const [row] = await t.query(
      `SELECT payload, status, run_at > now() + interval '50 seconds' AS later FROM ${t.jobs} WHERE id = $1`,
      [job.id],
    );
    expect(row).toEqual({ payload: { orderId: 42 }, status: 'queued', later: true });

    const plain = await runCli(['enqueue', 'resize_image', ...conn()]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toMatch(/^enqueued job \d+ \(kind resize_image, queue default/);

    const statsJson = await runCli(['stats', '--json', ...conn()]);
    expect(statsJson.code, statsJson.stderr).toBe(0);
    expect(JSON.parse(statsJson.stdout)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ queue: 'emails', status: 'queued', count: 1 }),
        expect.objectContaining({ queue: 'default', status: 'queued', count: 1 }),
      ]),
    );
    const statsTable = await runCli(['stats', ...conn()]);
    expect(statsTable.stdout.split('\n')[0]).toMatch(
      /^queue\s+waiting\s+queued\s+running\s+succeeded\s+failed\s+dead\s+cancelled\s+oldest due/,
    );
    expect(statsTable.stdout).toMatch(/^emails\s+0\s+1\s+0\s+0\s+0\s+0\s+0/m);

    const listed = await runCli(['jobs', '--queue', 'emails', '--json', ...conn()]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).map((j: { id: string }) => j.id)).toEqual([job.id]);
    const listTable = await runCli([
      'jobs',
      'list',
      '--kind',
      'resize_image',
      '--status',
      'queued',
      ...conn(),
    ]);
    expect(listTable.stdout).toMatch(/^id\s+queue\s+kind\s+status/);
    expect(listTable.stdout).toMatch(/resize_image\s+queued/);
    expect(listTable.stdout).not.toMatch(/send_invoice_email/);

    const shown = await runCli(['jobs', 'show', job.id, ...conn()]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/payload\s+\{"orderId":42\}/);
    // The connection flags and --json go before the subcommand as well as after it.
    const shownJson = await runCli(['jobs', '--json', ...conn(), 'show', job.id]);
    expect(shownJson.code, shownJson.stderr).toBe(0);
    expect(JSON.parse(shownJson.stdout)).toMatchObject({ id: job.id, payload: { orderId: 42 } });
    const missing = await runCli(['jobs', 'show', '999999', ...conn()]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no job 999999/);
  });

  it('requeues dead jobs by filter, and refuses a requeue without any filter', async () => {
    const [dead] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, queue, status, attempts, max_attempts, last_error)
       VALUES ('flaky', 'requeue-q', 'dead', 3, 3, 'Error: boom') RETURNING id`,
    );
    const none = await runCli(['requeue', ...conn()]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/--all/);
    const done = await runCli(['requeue', '--status', 'dead', '--kind', 'flaky', '--json', ...conn()]);
    expect(done.code, done.stderr).toBe(0);
    expect(JSON.parse(done.stdout)).toEqual({ requeued: 1 });
    const [row] = await t.query(`SELECT status, attempts, last_error FROM ${t.jobs} WHERE id = $1`, [
      dead!.id,
    ]);
    expect(row).toEqual({ status: 'queued', attempts: 0, last_error: null });
  });

  it('refuses a cancel that names no job, and cancels nothing', async () => {
    const job = await t.skiplock.enqueue('keep-me', {}, { queue: 'cancel-none-q' });
    const none = await runCli(['cancel', ...conn()]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(
      /give job ids, --status, --kind, --queue or --tag \(cancel never means every job\)/,
    );
    const [row] = await t.query(`SELECT status FROM ${t.jobs} WHERE id = $1`, [job.id]);
    expect(row).toEqual({ status: 'queued' });
  });

  it('exits 2 on bad flags and arguments, naming the flag, and changes nothing', async () => {
    await t.skiplock.enqueue('already-there', {});
    const cases: [string[], RegExp][] = [
      [['enqueue', 'k', '--bogus', ...conn()], /unknown option '--bogus'/],
      [['enqueue', 'k', '--priority', '1.5', ...conn()], /--priority/],
      [['enqueue', 'k', '--max-attempts', '0', ...conn()], /--max-attempts/],
      [['enqueue', 'k', '--delay-ms', '-5', ...conn()], /--delay-ms/],
      [['enqueue', 'k', '{not json', ...conn()], /PAYLOAD_JSON is not valid JSON/],
      [['enqueue', ...conn()], /missing required argument 'KIND'/],
      [['worker', '--handlers', 'x.mjs', '--concurrency', 'abc', ...conn()], /--concurrency/],
      [['worker', '--handlers', 'x.mjs', '--on-success', 'never', ...conn()], /--on-success/],
      [['worker', ...conn()], /--handlers/],
      [['jobs', '--status', 'lost', ...conn()], /--status/],
      [
        [
          'worker',
          '--handlers',
          'test/cli/fixtures/handlers.mjs',
          '--visibility-timeout-ms',
          '1000',
          '--heartbeat-interval-ms',
          '5000',
          ...conn(),
        ],
        /invalid --heartbeat-interval-ms: must be below visibilityTimeoutMs/,
      ],
      [['enqueue', '', ...conn()], /is invalid for argument 'KIND'. must not be empty/],
      [['nosuchcommand'], /unknown command 'nosuchcommand'/],
      [['enqueue', 'k', '--schema', '', ...conn().slice(0, 2)], /schema/],
    ];
    const results = await runCliEach(cases.map(([args]) => args));
    cases.forEach(([args, message], i) => {
      const result = results[i]!;
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(message);
    });
    expect(await t.jobCount()).toBe(1);
  });

  it('explains an unreadable, broken or invalid handlers file, naming it (exit 2)', async () => {
    // Broken files are written at run time: as fixtures in the tree, the linter would read them.
    const scratch = mkdtempSync(join(tmpdir(), 'skiplock-handlers-'));
    t.defer(() => rmSync(scratch, { recursive: true, force: true }));
    const write = (name: string, text: string) => {
      writeFileSync(join(scratch, name), text);
      return relative(process.cwd(), join(scratch, name));
    };
    const files = {
      syntax: write('syntax-error.mjs', 'export default {\n  echo: () => {,\n};\n'),
      throws: write('throws.mjs', "throw new Error('cannot start: no API key');\n"),
      number: write('number.mjs', 'export default 42;\n'),
      empty: write('empty.mjs', 'export default {};\n'),
    };
    const cases: [string, RegExp][] = [
      ['no/such/handlers.js', /cannot load handlers file no\/such\/handlers\.js: no such file\n/],
      [scratch, /: not a file\n/],
      [files.syntax, /cannot load handlers file \S*syntax-error\.mjs: Unexpected token/],
      [files.throws, /cannot load handlers file \S*throws\.mjs: cannot start: no API key\n/],
      [
        files.number,
        /cannot load handlers file \S*number\.mjs: its default export must be an object mapping kinds to handler functions\n/,
      ],
      [
        files.empty,
        /cannot load handlers file \S*empty\.mjs: its default export has no handlers \(use --maintenance-only/,
      ],
      [
        'test/cli/fixtures/not-handlers.mjs',
        /cannot load handlers file test\/cli\/fixtures\/not-handlers\.mjs: the handler of kind "echo" is neither a function nor \{ handle, … \} nor \{ handleBatch, … \}\n/,
      ],
    ];
    const results = await runCliEach(cases.map(([file]) => ['worker', '--handlers', file, ...conn()]));
    cases.forEach(([file, message], i) => {
      expect(results[i]!.code, `${file}: ${results[i]!.stderr}`).toBe(2);
      expect(results[i]!.stderr, file).toMatch(message);
    });
  });

  it('prints help with examples for every command, exit 0', async () => {
    const commands = ['migrate', 'worker', 'enqueue', 'stats', 'jobs', 'requeue', 'demo', 'dev'];
    const helps = await runCliEach(commands.map((command) => [command, '--help']));
    commands.forEach((command, i) => {
      expect(helps[i]!.code, command).toBe(0);
      expect(helps[i]!.stdout, command).toMatch(/Examples:\n {2}\$ skiplock /);
    });
  });
});
