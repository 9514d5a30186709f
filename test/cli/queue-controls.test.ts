import { describe, expect, it } from 'vitest';
import { TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { NO_LIMITS } from '../support/queue-limits.js';
import { runCli } from './cli-process.js';

const { db, skiplock } = useFileDatabase();
const conn = ['--database-url', db.url, '--schema', TEST_SCHEMA];

describe('skiplock CLI queue controls', () => {
  it('cancel, queues pause/resume and prune', async () => {
    const job = await skiplock.enqueue('k', {}, { queue: 'cli-q' });
    const cancelled = await runCli(['cancel', job.id, ...conn, '--json']);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ cancelled: 1, running: 0 });
    const again = await runCli(['cancel', job.id, ...conn]);
    expect(again.stdout.trim()).toBe('no waiting, queued or running job matched');
    const none = await runCli(['cancel', ...conn]);
    expect(none.code).toBe(2);

    const paused = await runCli(['queues', 'pause', 'cli-q', ...conn]);
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout.trim()).toBe('paused cli-q');
    const listed = await runCli(['queues', ...conn, '--json']);
    expect(JSON.parse(listed.stdout)).toEqual([
      {
        name: 'cli-q',
        paused: true,
        pausedAt: expect.any(String),
        queued: 0,
        running: 0,
        limits: NO_LIMITS,
      },
    ]);
    const table = await runCli(['queues', ...conn]);
    expect(table.stdout).toMatch(/cli-q\s+paused/);
    const resumed = await runCli(['queues', 'resume', 'cli-q', ...conn]);
    expect(resumed.stdout.trim()).toBe('resumed cli-q');

    await db.query(`UPDATE ${db.jobs} SET finished_at = now() - interval '2 hours' WHERE id = $1`, [job.id]);
    const pruned = await runCli([
      'prune',
      '--older-than-ms',
      '3600000',
      '--status',
      'cancelled',
      ...conn,
      '--json',
    ]);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(JSON.parse(pruned.stdout)).toEqual({ jobs: 1, archive: 0, archivePartitions: 0 });
    const missing = await runCli(['prune', ...conn]);
    expect(missing.code).toBe(2);
  });

  it('prune says how many archive days it dropped whole', async () => {
    await db.query(`SELECT "${TEST_SCHEMA}".archive_partition(current_date - 3)`);
    await db.query(
      `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                  created_at, lease_seq, finished_at)
       SELECT 900000 + n, 'cli-q', 'k', '{}', 'succeeded', 0, now(), 1, 1, now(), 1, now() - interval '3 days'
       FROM generate_series(1, 2) n`,
    );
    const pruned = await runCli(['prune', '--older-than-ms', '3600000', ...conn]);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.stdout.trim()).toBe('deleted 0 jobs and 0 archived, and dropped 1 archive day partition');
  });
});
