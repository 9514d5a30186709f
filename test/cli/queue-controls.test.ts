import { describe, expect, it } from 'vitest';
import { archiveThreeDaysAgo } from '../support/archive-day.js';
import { TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { NO_LIMITS } from '../support/queue-limits.js';
import { cliOn } from './cli-process.js';

const { db, skiplock } = useFileDatabase();
const cli = cliOn(() => ({ url: db.url, schema: TEST_SCHEMA }));

describe('skiplock CLI queue controls', () => {
  it('cancel, queues pause/resume and prune', async () => {
    const job = await skiplock.enqueue('k', {}, { queue: 'cli-q' });
    const cancelled = await cli('cancel', job.id, '--json');
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toEqual({ cancelled: 1, running: 0 });
    const again = await cli('cancel', job.id);
    expect(again.stdout.trim()).toBe('no waiting, queued or running job matched');
    const none = await cli('cancel');
    expect(none.code).toBe(2);

    const paused = await cli('queues', 'pause', 'cli-q');
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout.trim()).toBe('paused cli-q');
    const listed = await cli('queues', '--json');
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
    const table = await cli('queues');
    expect(table.stdout).toMatch(/cli-q\s+paused/);
    const resumed = await cli('queues', 'resume', 'cli-q');
    expect(resumed.stdout.trim()).toBe('resumed cli-q');

    await db.query(`UPDATE ${db.jobs} SET finished_at = now() - interval '2 hours' WHERE id = $1`, [job.id]);
    const pruned = await cli('prune', '--older-than-ms', '3600000', '--status', 'cancelled', '--json');
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(JSON.parse(pruned.stdout)).toEqual({ jobs: 1, archive: 0, archivePartitions: 0 });
    const missing = await cli('prune');
    expect(missing.code).toBe(2);
  });

  it('prune says how many archive days it dropped whole', async () => {
    await archiveThreeDaysAgo(db, 'cli-q', 900000);
    const pruned = await cli('prune', '--older-than-ms', '3600000');
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.stdout.trim()).toBe('deleted 0 jobs and 0 archived, and dropped 1 archive day partition');
  });
});
