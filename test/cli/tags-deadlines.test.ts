/** The CLI's tags and start deadlines: enqueue --tag/--start-within-ms, and --tag filters of jobs, cancel, requeue. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type JobRecord, Skiplock } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { cliOn } from './cli-process.js';

let db: TestDatabase;
let skiplock: Skiplock;
const schema = 'cli_tags';
const cli = cliOn(() => ({ url: db.url, schema }));

beforeAll(async () => {
  db = await createTestDatabase(false);
  skiplock = new Skiplock({ pool: db.pool, schema });
  await skiplock.migrate();
});
afterAll(async () => {
  await skiplock?.close();
  await db?.close();
});

describe('skiplock CLI: tags and start deadlines', () => {
  it('enqueue --tag (repeatable) and --start-within-ms (database clock)', async () => {
    const result = await cli(
      'enqueue',
      'k',
      '{}',
      '--tag',
      'tenant:7',
      '--tag',
      'import',
      '--start-within-ms',
      '60000',
      '--json',
    );
    expect(result.code, result.stderr).toBe(0);
    const { id } = JSON.parse(result.stdout) as { id: string };
    expect((await skiplock.getJob(id))?.tags).toEqual(['tenant:7', 'import']);
    const [row] = await db.query<{ within_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS within_ms FROM "${schema}".jobs WHERE id = $1`,
      [id],
    );
    expect(row?.within_ms).toBe(60_000);

    const shown = await cli('jobs', 'show', id);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('tags          tenant:7, import');
    expect(shown.stdout).toMatch(/start_by {6}\d{4}-\d\d-\d\dT/);
  });

  it('refuses bad tags and deadlines with exit code 2, naming the flag, inserting nothing', async () => {
    const before = await skiplock.listJobs({ limit: 1000 });
    const empty = await cli('enqueue', 'k', '--tag', '');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('invalid --tag: must not be empty');
    const twice = await cli('enqueue', 'k', '--tag', 'a', '--tag', 'a');
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('invalid --tag: repeats the tag "a"');
    const negative = await cli('enqueue', 'k', '--start-within-ms', '-5');
    expect(negative.code).toBe(2);
    expect(await skiplock.listJobs({ limit: 1000 })).toHaveLength(before.length);
  });

  it('takes deadlines and delays longer than 24.8 days, as the library does', async () => {
    const thirtyDaysMs = 30 * 86_400_000;
    const result = await cli(
      'enqueue',
      'k',
      '--start-within-ms',
      String(thirtyDaysMs),
      '--delay-ms',
      String(thirtyDaysMs - 1000),
      '--json',
    );
    expect(result.code, result.stderr).toBe(0);
    const { id } = JSON.parse(result.stdout) as { id: string };
    const [row] = await db.query<{ within_ms: number; delay_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM start_by - created_at) * 1000)::float8 AS within_ms,
              (EXTRACT(EPOCH FROM run_at - created_at) * 1000)::float8 AS delay_ms
       FROM "${schema}".jobs WHERE id = $1`,
      [id],
    );
    expect(row).toEqual({ within_ms: thirtyDaysMs, delay_ms: thirtyDaysMs - 1000 });
  });

  it('jobs, cancel and requeue filter by --tag (jobs having every tag given)', async () => {
    const [ab, a, b] = await skiplock.enqueueMany([
      { kind: 'k', payload: {}, queue: 'cli-tags', tags: ['x', 'y'] },
      { kind: 'k', payload: {}, queue: 'cli-tags', tags: ['x'] },
      { kind: 'k', payload: {}, queue: 'cli-tags', tags: ['y'] },
    ]);
    const list = async (...tags: string[]) => {
      const result = await cli('jobs', '--oldest-first', '--json', ...tags.flatMap((t) => ['--tag', t]));
      expect(result.code, result.stderr).toBe(0);
      return (JSON.parse(result.stdout) as JobRecord[]).map((j) => j.id);
    };
    expect(await list('x')).toEqual([ab!.id, a!.id]);
    expect(await list('x', 'y')).toEqual([ab!.id]);

    const table = await cli('jobs', '--tag', 'y');
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain('x, y');

    const cancelled = await cli('cancel', '--tag', 'x', '--tag', 'y', '--json');
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ cancelled: 1, running: 0 });
    expect((await skiplock.getJob(ab!.id))?.status).toBe('cancelled');
    expect((await skiplock.getJob(a!.id))?.status).toBe('queued');
    expect((await skiplock.getJob(b!.id))?.status).toBe('queued');

    const requeued = await cli('requeue', '--tag', 'x', '--status', 'cancelled', '--json');
    expect(requeued.code, requeued.stderr).toBe(0);
    expect(JSON.parse(requeued.stdout)).toEqual({ requeued: 1 });
    expect((await skiplock.getJob(ab!.id))?.status).toBe('queued');
  });
});
