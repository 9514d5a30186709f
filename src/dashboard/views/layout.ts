/**
 * The page shell: header navigation, notice, the static part of a page and its
 * live part (`#live`, refreshed in place by the client script).
 */
import type { Dashboard } from '../context.js';
import { SCRIPT, STYLE } from './assets.js';
import { type Html, html, trusted } from './html.js';

/** One page: its title, which nav entry it belongs to, a static part and a live part. */
export interface Page {
  title: string;
  nav: 'queues' | 'jobs' | 'schedules' | 'archive';
  /** Rendered once (filters, headings): not replaced by live refresh. */
  top?: Html;
  /** Replaced every refresh interval by the same URL's `?partial=1`. */
  live: Html;
}

/** A notice shown after an action, from the fixed set below (never text from the URL). */
export const NOTICES = {
  requeued: { text: 'Requeued.', warn: false },
  'requeued-none': { text: 'Nothing was requeued: no job matched (already queued?).', warn: true },
  deleted: { text: 'Deleted.', warn: false },
  'delete-refused': {
    text: 'Not deleted: the job is running (its lease belongs to a worker) or gone.',
    warn: true,
  },
  cancelled: { text: 'Cancelled.', warn: false },
  'cancel-requested': {
    text: 'Cancel requested: the worker running the job is told to abort it; it ends cancelled when its handler stops.',
    warn: false,
  },
  'cancel-none': { text: 'Nothing was cancelled: the job is no longer queued or running.', warn: true },
  paused: { text: 'Paused: workers claim no more jobs of the queue; running jobs finish.', warn: false },
  'paused-already': { text: 'The queue was paused already.', warn: true },
  resumed: { text: 'Resumed.', warn: false },
  'resumed-already': { text: 'The queue was not paused.', warn: true },
} as const;

/** Name of a notice. */
export type NoticeName = keyof typeof NOTICES;

/** The whole HTML document of a page. */
export function layout(d: Dashboard, nonce: string, page: Page, notice: string | undefined): Html {
  const shown =
    notice !== undefined && Object.hasOwn(NOTICES, notice) ? NOTICES[notice as NoticeName] : undefined;
  const navLink = (name: Page['nav'], label: string, path: string) =>
    html`<a href="${d.link(path)}" class="${page.nav === name ? 'active' : ''}">${label}</a>`;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>${page.title} · skiplock</title>
<style nonce="${nonce}">${trusted(STYLE)}</style>
</head>
<body data-refresh-ms="${d.options.refreshIntervalMs}">
<header>
  <a class="brand" href="${d.link('/')}">skiplock</a>
  <nav>${navLink('queues', 'Queues', '/')}${navLink('jobs', 'Jobs', '/jobs')}${navLink('schedules', 'Schedules', '/schedules')}${navLink('archive', 'Archive', '/archive')}</nav>
  <div class="meta">
    ${d.options.readOnly ? html`<span class="badge">read-only</span>` : ''}
    <span>schema ${d.skiplock.schema}</span>
    <span id="updated">${d.options.refreshIntervalMs > 0 ? 'live' : ''}</span>
  </div>
</header>
<main>
  ${shown ? html`<div class="notice${shown.warn ? ' warn' : ''}" role="status">${shown.text}</div>` : ''}
  ${page.top ?? ''}
  <div id="live">${page.live}</div>
</main>
<script nonce="${nonce}">${trusted(SCRIPT)}</script>
</body>
</html>`;
}

/**
 * A POST button with the CSRF token and a confirmation. Absent in read-only mode.
 *
 * @param fields - hidden fields sent with the form (names and values are escaped).
 */
export function actionButton(
  d: Dashboard,
  csrfToken: string,
  action: { path: string; label: string; confirm: string; danger?: boolean; fields?: Record<string, string> },
): Html {
  if (d.options.readOnly) return html``;
  const hidden = Object.entries(action.fields ?? {}).map(
    ([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`,
  );
  return html`<form class="inline" method="post" action="${d.link(action.path)}" data-confirm="${action.confirm}">
<input type="hidden" name="_csrf" value="${csrfToken}">${hidden}<button type="submit" class="${action.danger ? 'danger' : 'primary'}">${action.label}</button></form>`;
}

/** A status as a coloured pill. */
export function statusPill(status: string): Html {
  return html`<span class="status status-${status}">${status}</span>`;
}

/** The form that opens a job by its id (the jobs page, and the archive's). */
export function jobIdForm(d: Dashboard): Html {
  return html`<form class="filters" method="get" action="${d.link('/jobs')}">
<label>job id<input name="id" inputmode="numeric" placeholder="e.g. 42"></label><button type="submit">Open</button>
</form>`;
}
