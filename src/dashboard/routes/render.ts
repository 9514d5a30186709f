/**
 * Sends a page: the whole document, or only its live part when the client
 * script asks with `?partial=1`.
 */
import type { Context } from 'hono';
import type { Dashboard, DashboardEnv } from '../context.js';
import { html } from '../views/html.js';
import { layout, type Page } from '../views/layout.js';

/** Responds with the page (status 200 unless given). */
export function render(c: Context<DashboardEnv>, d: Dashboard, page: Page, status: 200 | 400 | 404 = 200) {
  if (c.req.query('partial') === '1') return c.html(page.live, status);
  return c.html(layout(d, c.get('nonce'), page, c.req.query('notice')), status);
}

/** A page saying what was wrong with the request. */
export function errorPage(c: Context<DashboardEnv>, d: Dashboard, status: 400 | 404, message: string) {
  return render(
    c,
    d,
    {
      title: status === 404 ? 'Not found' : 'Bad request',
      nav: 'jobs',
      live: html`<div class="card"><h1>${status === 404 ? 'Not found' : 'Bad request'}</h1><p>${message}</p></div>`,
    },
    status,
  );
}
