/** The dashboard's tags: shown on the jobs list and the job page, and a tag filter on the jobs page. */
import { describe, expect, it } from 'vitest';
import { useDashboardRequests } from './support/dashboard-requests.js';

const { skiplock, get } = useDashboardRequests();

/** Ids of the rows of a jobs page, in order. */
const rowIds = (body: string) => [...body.matchAll(/data-job-id="(\d+)"/g)].map((m) => m[1]);

describe('dashboard tags', () => {
  it('filters the jobs page by tags (every tag given), keeping the filter in the page links', async () => {
    const [xy, x, y] = await skiplock.enqueueMany([
      { kind: 'k', payload: {}, tags: ['x', 'y'] },
      { kind: 'k', payload: {}, tags: ['x'] },
      { kind: 'k', payload: {}, tags: ['y'] },
      { kind: 'k', payload: {} },
    ]);
    const byX = await get('/jobs?tag=x');
    expect(byX.status).toBe(200);
    expect(rowIds(byX.body)).toEqual([x!.id, xy!.id]);
    const byBoth = await get('/jobs?tag=x&tag=y');
    expect(rowIds(byBoth.body)).toEqual([xy!.id]);
    // The form keeps both tags.
    expect(byBoth.body).toContain('<input type="hidden" name="tag" value="y">');
    expect(byBoth.body).toContain('<input name="tag" value="x"');
    expect(rowIds((await get('/jobs?tag=y&status=queued')).body)).toEqual([y!.id, xy!.id]);
    expect(rowIds((await get('/jobs?tag=')).body)).toHaveLength(4);
    const bad = await get(`/jobs?tag=${'z'.repeat(101)}`);
    expect(bad.status).toBe(400);
    expect(bad.body).toContain('Unusable tag filter: must be at most 100 characters.');
  });

  it('shows tags as escaped text and links, and the start deadline on the job page', async () => {
    const startBy = new Date(Date.now() + 3_600_000);
    const job = await skiplock.enqueue('k', {}, { tags: ['<script>alert(1)</script>', 'a&b'], startBy });
    const list = await get('/jobs');
    expect(list.body).not.toContain('<script>alert(1)</script>');
    expect(list.body).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    const one = await get(`/jobs/${job.id}`);
    expect(one.status).toBe(200);
    const tags = /data-field="tags">([\s\S]*?)<\/dd>/.exec(one.body)?.[1] ?? '';
    expect(tags).toContain('&lt;script&gt;alert(1)&lt;/script&gt;</a>');
    expect(tags).toContain('>a&amp;b</a>');
    expect(tags).toContain('tag=a%26b');
    const deadline = /data-field="start-by">([\s\S]*?)<\/dd>/.exec(one.body)?.[1] ?? '';
    expect(deadline).toContain(startBy.toISOString().slice(0, 19).replace('T', ' '));
    const plain = await skiplock.enqueue('k', {});
    const plainPage = await get(`/jobs/${plain.id}`);
    expect(plainPage.body).not.toContain('data-field="start-by"');
    expect(/data-field="tags">([\s\S]*?)<\/dd>/.exec(plainPage.body)?.[1]).toContain('none');
  });
});
