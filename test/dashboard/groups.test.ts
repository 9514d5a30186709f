/** The dashboard's group keys: a job's key on its page; a queue's group limits and its busiest keys on the queues page. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../../src/dashboard/index.js';
import type { Skiplock } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

let db: TestDatabase;
let skiplock: Skiplock;

beforeAll(async () => {
  db = await createTestDatabase();
  skiplock = db.skiplock();
});
afterAll(async () => {
  await db?.close();
});

async function get(path: string) {
  const res = await createDashboard(skiplock, { refreshIntervalMs: 0 }).request(path);
  return { status: res.status, body: await res.text() };
}

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
});
