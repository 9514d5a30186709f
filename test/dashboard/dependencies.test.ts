/** The dashboard's job page lists a job's parents and children, each linked to its page. */
import { expect, it } from 'vitest';
import { useDashboardRequests } from './support/dashboard-requests.js';

const { skiplock, get } = useDashboardRequests();

/** The job ids linked from the `data-field` element of a page. */
function linked(body: string, field: string): string[] {
  const dd = new RegExp(`<dd data-field="${field}">(.*?)</dd>`, 's').exec(body)?.[1] ?? '';
  return [...dd.matchAll(/href="\/jobs\/(\d+)"/g)].map((m) => m[1]!);
}

it('the job page links the parents and the children', async () => {
  const [a, b, c] = await skiplock.enqueueMany([
    { kind: 'charge', payload: {}, ref: 'a' },
    { kind: 'email', payload: {}, ref: 'b', dependsOn: ['a'] },
    { kind: 'ship', payload: {}, dependsOn: ['a', 'b'] },
  ]);
  const middle = await get(`/jobs/${b!.id}`);
  expect(middle.status).toBe(200);
  expect(linked(middle.body, 'depends-on')).toEqual([a!.id]);
  expect(linked(middle.body, 'children')).toEqual([c!.id]);
  const root = await get(`/jobs/${a!.id}`);
  expect(linked(root.body, 'depends-on')).toEqual([]);
  expect(linked(root.body, 'children')).toEqual([b!.id, c!.id]);
  expect(root.body).not.toContain('data-field="depends-on"');
});
