/**
 * State changes: requeue a job, delete a job, requeue a queue's dead and
 * failed jobs (cancel, pause and resume live in controls.ts). Each is a POST that passed the read-only and CSRF guards, and
 * answers with a redirect (303) to the page it came from, with a notice.
 */
import type { Context, Hono } from 'hono';
import type { Dashboard, DashboardEnv } from '../context.js';
import type { NoticeName } from '../views/layout.js';
import { isJobId } from './pages.js';
import { errorPage } from './render.js';

/** Pages an action may return to: the queues page, the jobs list (any filters), one job. */
const BACK = /^\/(jobs(\/[1-9][0-9]{0,18})?)?(\?[^#\\]*)?$/;

/**
 * Answers an action with a 303 to the page the form named in its `back` field
 * (when it is one of the dashboard's own pages), else to `fallback`, showing `notice`.
 */
export function redirectBack(
  c: Context<DashboardEnv>,
  d: Dashboard,
  fallback: string,
  notice: NoticeName,
): Response {
  const back = c.get('form').back;
  const path = typeof back === 'string' && BACK.test(back) ? back : fallback;
  const url = new URL(path, 'http://dashboard');
  url.searchParams.set('notice', notice);
  return c.redirect(d.link(`${url.pathname}${url.search}`), 303);
}

/** Registers the action routes on `app`. */
export function registerActions(app: Hono<DashboardEnv>, d: Dashboard): void {
  const redirect = (c: Context<DashboardEnv>, fallback: string, notice: NoticeName) =>
    redirectBack(c, d, fallback, notice);

  app.post('/jobs/:id/requeue', async (c) => {
    const id = c.req.param('id');
    if (!isJobId(id)) return errorPage(c, d, 404, 'No such job.');
    const count = await d.skiplock.requeue({ ids: [id] });
    return redirect(c, `/jobs/${id}`, count === 1 ? 'requeued' : 'requeued-none');
  });

  app.post('/jobs/:id/delete', async (c) => {
    const id = c.req.param('id');
    if (!isJobId(id)) return errorPage(c, d, 404, 'No such job.');
    const deleted = await d.queries.deleteJob(d.pool, id);
    if (!deleted) return redirect(c, `/jobs/${id}`, 'delete-refused');
    // The job's own page is gone: go back to the list instead.
    const back = c.get('form').back;
    if (typeof back === 'string' && back.startsWith(`/jobs/${id}`)) c.get('form').back = '/jobs';
    return redirect(c, '/jobs', 'deleted');
  });

  app.post('/queues/requeue', async (c) => {
    const queue = c.get('form').queue;
    if (typeof queue !== 'string' || queue === '' || queue.includes('\u0000')) {
      return errorPage(c, d, 400, 'Which queue? The form lacks a queue name.');
    }
    const count = await d.skiplock.requeue({ queue, status: ['dead', 'failed'] });
    return redirect(c, '/', count > 0 ? 'requeued' : 'requeued-none');
  });
}
