import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Skiplock } from '../../src/index.js';
import { TEST_SCHEMA, tableIn } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { runCli } from './cli-process.js';

const { db, skiplock } = useFileDatabase();
const conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];

describe('skiplock CLI for operators', () => {
  it('requeue says why nothing matched', async () => {
    const queued = await skiplock.enqueue('k', {}, { queue: 'op-requeue' });
    const byId = await runCli(['requeue', queued.id, '999999999', ...conn]);
    expect(byId.code, byId.stderr).toBe(0);
    expect(byId.stdout.trim().split('\n')).toEqual([
      'requeued 0 jobs',
      `job ${queued.id}: is queued; only dead, failed and cancelled jobs can be requeued`,
      'job 999999999: not in the jobs table (deleted on success, archived, or never existed)',
    ]);
    const byFilter = await runCli(['requeue', '--kind', 'nothing-like-this', ...conn, '--json']);
    expect(byFilter.code, byFilter.stderr).toBe(0);
    expect(JSON.parse(byFilter.stdout)).toEqual({
      requeued: 0,
      reasons: ['no dead or failed job with kind nothing-like-this'],
    });
    const byStatus = await runCli([
      'requeue',
      '--status',
      'cancelled',
      '--status',
      'dead',
      '--queue',
      'op-none',
      ...conn,
    ]);
    expect(byStatus.code, byStatus.stderr).toBe(0);
    expect(byStatus.stdout.trim().split('\n')).toEqual([
      'requeued 0 jobs',
      'no cancelled or dead job with queue op-none',
    ]);
  });

  it('jobs lists newest first and pages with --after', async () => {
    const ids = (
      await skiplock.enqueueMany(
        Array.from({ length: 5 }, (_, i) => ({ kind: 'k', payload: { i }, queue: 'op-page' })),
      )
    ).map((j) => j.id);
    const page = async (...args: string[]) => {
      const result = await runCli(['jobs', '--queue', 'op-page', '--limit', '2', '--json', ...args, ...conn]);
      expect(result.code, result.stderr).toBe(0);
      return (JSON.parse(result.stdout) as { id: string }[]).map((j) => j.id);
    };
    const newest = [...ids].reverse();
    const first = await page();
    expect(first).toEqual(newest.slice(0, 2));
    expect(await page('--after', first[1]!)).toEqual(newest.slice(2, 4));
    expect(await page('--oldest-first')).toEqual(ids.slice(0, 2));
    const bad = await runCli(['jobs', '--after', 'abc', ...conn]);
    expect(bad.code).toBe(2);
  });

  it('jobs reads a bounded preview of each payload, never whole payloads', async () => {
    const roomy = new Skiplock({ pool: db.pool, schema: TEST_SCHEMA, maxPayloadBytes: 2 ** 28 });
    const big = await roomy.enqueue('k', { blob: 'z'.repeat(3_000_000) }, { queue: 'op-preview' });
    await roomy.close();
    const result = await runCli([
      'jobs',
      '--queue',
      'op-preview',
      '--payload-chars',
      '12',
      '--json',
      ...conn,
    ]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.length).toBeLessThan(5_000);
    const [listed] = JSON.parse(result.stdout) as Record<string, unknown>[];
    expect(listed).toMatchObject({ id: big.id, payloadPreview: '{"blob": "zz', payloadTruncated: true });
    expect(listed).not.toHaveProperty('payload');
  });

  it('cancel and requeue take many ids from a file or standard input (--ids-from)', async () => {
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 300 }, (_, i) => ({ kind: 'k', payload: { i }, queue: 'op-ids' })),
    );
    const ids = jobs.map((j) => j.id);
    const cancelled = await runCli(['cancel', '--ids-from', '-', '--json', ...conn], {
      input: `${ids.slice(0, 200).join('\n')}\n`,
    });
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ cancelled: 200, running: 0 });
    const file = join(mkdtempSync(join(tmpdir(), 'skiplock-ids-')), 'ids.txt');
    writeFileSync(file, ids.slice(0, 150).join(', '));
    const requeued = await runCli(['requeue', '--ids-from', file, '--json', ...conn]);
    expect(requeued.code, requeued.stderr).toBe(0);
    expect(JSON.parse(requeued.stdout)).toEqual({ requeued: 150 });
    const counts = await db.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM ${tableIn(TEST_SCHEMA, 'jobs')} WHERE queue = 'op-ids' GROUP BY status ORDER BY status`,
    );
    expect(counts).toEqual([
      { status: 'cancelled', n: 50 },
      { status: 'queued', n: 250 },
    ]);
    const bad = await runCli(['cancel', '--ids-from', '-', ...conn], { input: '12\nabc\n' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^skiplock: error: --ids-from -: not a job id \(a positive integer\): abc$/m);
    const missing = await runCli(['requeue', '--ids-from', join(tmpdir(), 'skiplock-no-such-ids'), ...conn]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--ids-from \S+: no such file/);
  });

  it('an empty --ids-from selects no job, even beside filters that match many', async () => {
    const jobs = await skiplock.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ kind: 'k', payload: { i }, queue: 'op-empty-ids' })),
    );
    const cancelled = await runCli(
      ['cancel', '--ids-from', '-', '--queue', 'op-empty-ids', '--json', ...conn],
      {
        input: '',
      },
    );
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ cancelled: 0, running: 0 });
    await skiplock.cancel({ ids: [jobs[0]!.id] });
    const file = join(mkdtempSync(join(tmpdir(), 'skiplock-ids-')), 'none.txt');
    writeFileSync(file, '\n');
    const requeued = await runCli([
      'requeue',
      '--ids-from',
      file,
      '--status',
      'cancelled',
      '--json',
      ...conn,
    ]);
    expect(requeued.code, requeued.stderr).toBe(0);
    expect(JSON.parse(requeued.stdout)).toEqual({ requeued: 0 });
    const statuses = await db.query<{ status: string }>(
      `SELECT status FROM ${tableIn(TEST_SCHEMA, 'jobs')} WHERE queue = 'op-empty-ids' ORDER BY id`,
    );
    expect(statuses.map((r) => r.status)).toEqual(['cancelled', 'queued', 'queued']);
  });

  it('takes the connection flags before the command too, the later one when given twice; refuses them before a command without them', async () => {
    const job = await skiplock.enqueue('k', { first: true }, { queue: 'op-first' });
    const shown = await runCli([...conn, 'jobs', 'show', job.id, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({
      id: job.id,
      queue: 'op-first',
      payload: { first: true },
    });
    // A subcommand of `queues`, whose parent holds the flags.
    const paused = await runCli([...conn, 'queues', 'pause', 'op-first']);
    expect([paused.code, paused.stdout.trim()], paused.stderr).toEqual([0, 'paused op-first']);
    expect((await skiplock.queues()).find((q) => q.name === 'op-first')?.paused).toBe(true);
    // Given twice, before and after, the later wins, as any repeated flag (of `jobs` too).
    const twice = await runCli(['--schema', 'other', 'jobs', 'show', job.id, '--json', ...conn]);
    expect(twice.code, twice.stderr).toBe(0);
    expect(JSON.parse(twice.stdout)).toMatchObject({ id: job.id, queue: 'op-first' });
    // The program's own flags still work after a command.
    const version = await runCli(['stats', '--version']);
    expect([version.code, version.stdout.trim()]).toEqual([0, expect.stringMatching(/^\d+\.\d+\.\d+/)]);
    const dev = await runCli(['--schema', TEST_SCHEMA, 'dev']);
    expect([dev.code, dev.stderr.split('\n')[0]]).toEqual([
      2,
      'skiplock: error: --schema does not apply to skiplock dev',
    ]);
  });

  it('refuses bad ids, tags, names and flags before connecting, and never prints a password', async () => {
    // Nothing listens on port 1: a command that connected first would fail with exit 1.
    const nowhere = ['--database-url', 'postgres://u@127.0.0.1:1/x?password=s3cret', '--schema', 'x'];
    const cases: [string[], RegExp][] = [
      [['cancel', '--tag', ''], /^skiplock: error: invalid --tag: /m],
      [['requeue', '--tag', 'a', '--tag', 'a'], /^skiplock: error: invalid --tag: repeats the tag "a"/m],
      [['requeue', '--all', '5'], /^skiplock: error: --all cannot be combined with job ids/m],
      [['requeue', '--all', '--kind', 'k'], /^skiplock: error: --all cannot be combined with job ids/m],
      [
        ['cancel', '9223372036854775808'],
        /^skiplock: error: ID must be a job id \(a positive integer up to 9223372036854775807\), got 9223372036854775808$/m,
      ],
    ];
    for (const [args, message] of cases) {
      const result = await runCli([...args, ...nowhere]);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(result.stderr).toMatch(message);
    }
    const names: [string[], string][] = [
      [['enqueue', ''], "argument 'KIND'. must not be empty."],
      [['enqueue', 'k', '--queue', ''], "option '--queue <name>' argument '' is invalid. must not be empty."],
      [['queues', 'pause', ''], "argument 'NAME'. must not be empty."],
      [['queues', 'limits', 'q'.repeat(1025)], "argument 'NAME'. must be at most 1024 bytes of UTF-8."],
      [['schedule', 'n', '* * * * *', ''], "argument 'KIND'. must not be empty."],
      [['unschedule', ''], "argument 'NAME'. must not be empty."],
    ];
    for (const [args, message] of names) {
      const result = await runCli([...args, ...nowhere]);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain(message);
    }
    const refused = await runCli(['cancel', '--kind', 'k', ...nowhere]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('password=****');
    expect(refused.stderr).not.toContain('s3cret');
  });
});
