/** onSuccess: what a succeeded job leaves behind (deleted, kept, archived). */
import { describe, expect, it } from 'vitest';
import { nextEvent } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

async function runOne(onSuccess: 'delete' | 'keep' | 'archive') {
  const worker = t.worker({ pollIntervalMs: 100, queues: ['policy'], onSuccess, handlers: { p: () => {} } });
  await worker.start();
  const succeeded = nextEvent(worker, 'job:success');
  const job = await t.skiplock.enqueue('p', { v: onSuccess }, { queue: 'policy' });
  await succeeded;
  const hot = await t.query(
    `SELECT status, attempts, locked_by, payload, finished_at IS NOT NULL AS finished FROM ${t.jobs} WHERE id = $1`,
    [job.id],
  );
  const archived = await t.query(
    `SELECT status, attempts, locked_by, payload, finished_at IS NOT NULL AS finished FROM ${t.archive} WHERE id = $1`,
    [job.id],
  );
  return { hot, archived };
}

const done = (v: string) => ({
  status: 'succeeded',
  attempts: 1,
  locked_by: null,
  payload: { v },
  finished: true,
});

describe('success policies', () => {
  const cases = [
    { policy: 'delete', where: 'nowhere', hot: [], archived: [] },
    { policy: 'keep', where: 'the jobs table', hot: [done('keep')], archived: [] },
    { policy: 'archive', where: 'the archive only', hot: [], archived: [done('archive')] },
  ] as const;
  it.each(cases)(
    'onSuccess $policy leaves the succeeded job in $where',
    async ({ policy, hot, archived }) => {
      expect(await runOne(policy)).toEqual({ hot, archived });
    },
  );
});
