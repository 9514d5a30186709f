/**
 * The archive page: jobs moved to `jobs_archive` on success, newest first,
 * filtered by kind, queue, a range of UTC days, tags and payload fields, a
 * cursor to older pages, and a search by id. Read-only: an archived job is history.
 */
import type { ArchivedJobSummary } from '../../operations/archive.js';
import type { Dashboard } from '../context.js';
import { formatAge, formatTime } from './format.js';
import { html } from './html.js';
import { listLink, tagLinks } from './jobs.js';
import { jobIdForm, type Page, statusPill } from './layout.js';

/** The archive's filters as read from the query string (days as `YYYY-MM-DD`, UTC). */
export interface ArchiveQuery {
  kind?: string | undefined;
  queue?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
  /** Archived jobs having every one of these tags. */
  tags?: string[] | undefined;
  /** A JSON object the payloads must contain, as typed in the form. */
  payload?: string | undefined;
  /** The cursor of the last row of the previous page. */
  before?: string | undefined;
}

/** The archive page. */
export function archivePage(d: Dashboard, query: ArchiveQuery, jobs: ArchivedJobSummary[]): Page {
  const now = Date.now();
  const top = html`<h1>Archive</h1>
<div class="toolbar">
<form class="filters" method="get" action="${d.link('/archive')}">
<label>kind<input name="kind" value="${query.kind ?? ''}" placeholder="any"></label>
<label>queue<input name="queue" value="${query.queue ?? ''}" placeholder="any"></label>
<label>finished since<input type="date" name="since" value="${query.since ?? ''}"></label>
<label>until<input type="date" name="until" value="${query.until ?? ''}"></label>
${(query.tags ?? []).slice(1).map((t) => html`<input type="hidden" name="tag" value="${t}">`)}
<label>tag<input name="tag" value="${query.tags?.[0] ?? ''}" placeholder="any"></label>
<label>payload has<input name="payload" class="mono" value="${query.payload ?? ''}" placeholder='{"orderId": 42}'></label>
<button type="submit">Filter</button>
<a href="${d.link('/archive')}">clear</a>
</form>
${jobIdForm(d)}
</div>
<p class="muted">Jobs moved here on success (<code>onSuccess: 'archive'</code>), one partition per UTC day of their finish; days are UTC. A tag or payload search (JSON containment) reads the archive's indexes: a rare tag or value is found fast at any size.</p>`;
  const rows = jobs.map(
    (job) => html`<tr data-job-id="${job.id}">
<td class="mono"><a href="${d.link(`/jobs/${job.id}`)}">${job.id}</a></td>
<td>${job.kind}</td><td>${job.queue}</td><td>${statusPill(job.status)}</td>
<td data-field="tags">${tagLinks(d, job.tags, '/archive')}</td>
<td class="num">${job.attempts}</td>
<td class="nowrap" data-field="finished-at" title="${formatTime(job.finishedAt)}">${formatAge(job.finishedAt, now)}</td>
<td class="nowrap" title="${formatTime(job.createdAt)}">${formatAge(job.createdAt, now)}</td>
<td class="mono">${job.payloadPreview}${job.payloadTruncated ? '…' : ''}</td></tr>`,
  );
  const last = jobs.at(-1);
  const params = (extra: Record<string, string>) =>
    listLink(d, '/archive', query, ['kind', 'queue', 'since', 'until', 'payload'], extra);
  const pager = html`<div class="pager">
${query.before ? html`<a href="${params({})}">← newest</a>` : ''}
${last && jobs.length >= d.options.pageSize ? html`<a href="${params({ before: last.cursor })}" rel="next">older →</a>` : ''}
<span class="muted">${jobs.length} shown, newest first</span></div>`;
  const table =
    jobs.length === 0
      ? html`<div class="card muted">No archived jobs match.</div>`
      : html`<table class="jobs"><thead><tr><th>id</th><th>kind</th><th>queue</th><th>status</th><th>tags</th><th class="num">attempts</th><th>finished</th><th>created</th><th>payload</th></tr></thead>
<tbody>${rows}</tbody></table>`;
  return { title: 'Archive', nav: 'archive', top, live: html`${table}${pager}` };
}
