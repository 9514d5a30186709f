/** The dashboard's group keys: a job's key on its page; a queue's group limits and its busiest keys on the queues page. */
import { describe, expect, it } from 'vitest';
import { useDashboardRequests } from './support/dashboard-requests.js';

const { db, skiplock, get } = useDashboardRequests();

/** The text of the element marked `data-field="name"` on `body`. */
const field = (body: string, name: string) =>
  new RegExp(`data-field="${name}">([\\s\\S]*?)</dd>`).exec(body)?.[1] ?? null;

describe('dashboard group keys', () => {
  it('shows a job’s group key, escaped, on its page; none for a job without one', async () => {
    const keyed = await skiplock.enqueue('k', {}, { groupKey: '<b>acct</b>&1' });
    const page = await get(`/jobs/${keyed.id}`);
    expect(page.status).toBe(200);
    expect(field(page.body, 'group-key')).toBe('&lt;b&gt;acct&lt;/b&gt;&amp;1');
    const plain = await skiplock.enqueue('k', {});
    expect(field((await get(`/jobs/${plain.id}`)).body, 'group-key')).toBe('<span class="muted">none</span>');
  });

  it('shows a grouped queue’s group limits, its keys with running jobs and the five busiest, escaped', async () => {
    await skiplock.setQueueLimits('grouped', { concurrency: 10, groupConcurrency: 3, strictOrder: true });
    await skiplock.setQueueLimits('plain-limited', { concurrency: 4 });
    await skiplock.enqueue('k', {}, { queue: 'plain-limited' });
    const running = { a: 3, b: 2, 'c<&>': 1, d: 1, e: 1, f: 1 };
    const jobs = await skiplock.enqueueMany(
      Object.entries(running).flatMap(([groupKey, n]) =>
        Array.from({ length: n }, () => ({ kind: 'k', payload: {}, queue: 'grouped', groupKey })),
      ),
    );
    // A queued job of another key counts for nothing.
    await skiplock.enqueue('k', {}, { queue: 'grouped', groupKey: 'idle' });
    const cell = (body: string, queue: string) =>
      new RegExp(`data-queue="${queue}" data-limits>([\\s\\S]*?)</td>`).exec(body)?.[1] ?? null;

    const idle = (await get('/')).body;
    expect(cell(idle, 'grouped')).toBe(
      '<div>≤ 10 running</div><div data-group-limits>per key ≤ 3 running · in order</div><div class="muted" data-group-keys>no key running</div>',
    );
    expect(cell(idle, 'plain-limited')).toBe('≤ 4 running');

    await db.query(
      `UPDATE ${db.jobs} SET status = 'running', attempts = 1, lease_seq = 1, locked_by = 'w', locked_at = now()
       WHERE id = ANY($1::bigint[])`,
      [jobs.map((j) => j.id)],
    );
    const busy = (await get('/')).body;
    expect(/data-group-keys>([\s\S]*?)<\/div>/.exec(cell(busy, 'grouped') ?? '')?.[1]).toBe(
      '6 keys running; busiest: <span class="mono">a</span> (3), <span class="mono">b</span> (2), ' +
        '<span class="mono">c&lt;&amp;&gt;</span> (1), <span class="mono">d</span> (1), <span class="mono">e</span> (1)',
    );
  });
});
