/**
 * The queue controls: cancel a job, pause and resume a queue. Like every
 * action each is a POST that passed the read-only and CSRF guards, and answers
 * with a redirect (303) to the page it came from, with a notice.
 */
import type { Context, Hono } from 'hono';
import { ValidationError } from '../../errors.js';
import type { Dashboard, DashboardEnv } from '../context.js';
import { redirectBack } from './actions.js';
import { isJobId } from './pages.js';
import { errorPage } from './render.js';

/** Registers the cancel, pause and resume routes on `app`. */
export function registerControls(app: Hono<DashboardEnv>, d: Dashboard): void {
  app.post('/jobs/:id/cancel', async (c) => {
    const id = c.req.param('id');
    if (!isJobId(id)) return errorPage(c, d, 404, 'No such job.');
    const { cancelled, running } = await d.skiplock.cancel({ ids: [id] });
    const notice = cancelled === 1 ? 'cancelled' : running === 1 ? 'cancel-requested' : 'cancel-none';
    return redirectBack(c, d, `/jobs/${id}`, notice);
  });

  registerQueueControl(app, d, '/queues/pause', (queue) => d.skiplock.pauseQueue(queue), 'paused');
  registerQueueControl(app, d, '/queues/resume', (queue) => d.skiplock.resumeQueue(queue), 'resumed');
}

/**
 * A POST at `path` that runs `control` on the form's queue and redirects to
 * the overview with the notice `done` (it changed the queue) or `done-already`.
 */
function registerQueueControl(
  app: Hono<DashboardEnv>,
  d: Dashboard,
  path: string,
  control: (queue: string) => Promise<boolean>,
  done: 'paused' | 'resumed',
): void {
  app.post(path, async (c) => {
    const queue = formQueue(c);
    if (queue === undefined) return errorPage(c, d, 400, 'Which queue? The form lacks a queue name.');
    const changed = await nameChecked(c, d, () => control(queue));
    if (changed instanceof Response) return changed;
    return redirectBack(c, d, '/', changed ? done : `${done}-already`);
  });
}

function formQueue(c: Context<DashboardEnv>): string | undefined {
  const queue = c.get('form').queue;
  return typeof queue === 'string' && queue !== '' ? queue : undefined;
}

/** Runs a queue control; a name the library refuses becomes a 400 page instead of a 500. */
async function nameChecked(
  c: Context<DashboardEnv>,
  d: Dashboard,
  control: () => Promise<boolean>,
): Promise<boolean | Response> {
  try {
    return await control();
  } catch (error) {
    if (error instanceof ValidationError)
      return errorPage(c, d, 400, `Unusable queue name: ${error.message}`);
    throw error;
  }
}
