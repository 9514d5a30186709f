import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Skiplock } from '../../src/index.js';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase } from '../support/database.js';
import { runCli } from './cli-process.js';

let db: TestDatabase;
let skiplock: Skiplock;
let conn: string[];

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
  conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];
});
afterAll(async () => {
  await db?.close();
});

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
});
