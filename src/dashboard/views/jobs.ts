/**
 * The jobs page: filters (status, kind, queue, tags), a search by id, the jobs
 * newest first with their tags, and a cursor to older pages.
 */
import { JOB_STATUSES, type JobRecord, type JobSummary } from '../../job/job.js';
import type { Dashboard } from '../context.js';
import { formatAge, formatTime } from './format.js';
import { type Html, html } from './html.js';
import { actionButton, jobIdForm, type Page, statusPill } from './layout.js';

/** The filters as read from the query string. */
export interface JobsQuery {
  status?: string | undefined;
  kind?: string | undefined;
  queue?: string | undefined;
  /** Jobs having every one of these tags. */
  tags?: string[] | undefined;
  before?: string | undefined;
}

/** A job's tags, each a link to the jobs (or, with `page` '/archive', the archived jobs) having it. */
export function tagLinks(d: Dashboard, tags: readonly string[], page: '/jobs' | '/archive' = '/jobs'): Html {
  return html`${tags.map(
    (tag) =>
      html`<a class="tag" href="${d.link(`${page}?${new URLSearchParams({ tag }).toString()}`)}">${tag}</a> `,
  )}`;
}

/**
 * A link to a list page with its filters: the `keys` of `query` that are set,
 * each of its tags as a `tag` parameter, then `extra` (a cursor) on top; the
 * bare page when nothing is set. The pagers go through it so that an older
 * page lists the same jobs. Never throws.
 */
export function listLink<Key extends string>(
  d: Dashboard,
  page: '/jobs' | '/archive',
  query: { readonly [K in Key]?: string | undefined } & { readonly tags?: readonly string[] | undefined },
  keys: readonly Key[],
  extra: Record<string, string>,
): string {
  const p = new URLSearchParams();
  for (const key of keys) {
    const value = query[key];
    if (value) p.set(key, value);
  }
  for (const tag of query.tags ?? []) p.append('tag', tag);
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  const text = p.toString();
  return d.link(`${page}${text ? `?${text}` : ''}`);
}

/**
 * Buttons a job's state allows: requeue (dead, failed, cancelled), cancel
 * (queued, or running without a cancel asked for yet) and delete (anything not running).
 */
export function jobActions(
  d: Dashboard,
  csrfToken: string,
  job: Omit<JobRecord, 'payload'>,
  back: string,
): Html {
  const fields = { back };
  const cancellable = job.status === 'queued' || (job.status === 'running' && job.cancelRequestedAt === null);
  return html`${
    job.status === 'dead' || job.status === 'failed' || job.status === 'cancelled'
      ? actionButton(d, csrfToken, {
          path: `/jobs/${job.id}/requeue`,
          label: 'Requeue',
          confirm: `Requeue job ${job.id} (${job.kind})? It runs again from attempt 1.`,
          fields,
        })
      : ''
  }${
    cancellable
      ? actionButton(d, csrfToken, {
          path: `/jobs/${job.id}/cancel`,
          label: 'Cancel',
          confirm:
            job.status === 'running'
              ? `Cancel job ${job.id} (${job.kind})? Its worker is told to abort the handler; the job ends cancelled and is not retried.`
              : `Cancel job ${job.id} (${job.kind})? It will not run.`,
          danger: true,
          fields,
        })
      : ''
  }${
    job.status !== 'running'
      ? actionButton(d, csrfToken, {
          path: `/jobs/${job.id}/delete`,
          label: 'Delete',
          confirm: `Delete job ${job.id} (${job.kind})? This cannot be undone.`,
          danger: true,
          fields,
        })
      : ''
  }`;
}

/** Why a job shows no attempt limit of its own yet. */
export const KIND_DECIDES_TITLE =
  "enqueued without maxAttempts: its kind's handler sets the limit when a worker first claims it (20 when the handler gives none)";

/** The jobs page. `back` is this page's own path and query, where actions return to. `kindDecides`: ids whose limit is their kind's, not yet known. */
export function jobsPage(
  d: Dashboard,
  csrfToken: string,
  query: JobsQuery,
  queues: string[],
  jobs: JobSummary[],
  back: string,
  kindDecides: ReadonlySet<string> = new Set(),
): Page {
  const now = Date.now();
  const option = (value: string, label: string, selected: boolean) =>
    html`<option value="${value}"${selected ? html` selected` : ''}>${label}</option>`;
  const filters = html`<h1>Jobs</h1>
<div class="toolbar">
<form class="filters" method="get" action="${d.link('/jobs')}">
<label>status<select name="status">${option('', 'any', !query.status)}${JOB_STATUSES.map((s) => option(s, s, query.status === s))}</select></label>
<label>queue<input name="queue" list="queue-names" value="${query.queue ?? ''}" placeholder="any"></label>
<datalist id="queue-names">${queues.map((q) => html`<option value="${q}"></option>`)}</datalist>
<label>kind<input name="kind" value="${query.kind ?? ''}" placeholder="any"></label>
${(query.tags ?? []).slice(1).map((t) => html`<input type="hidden" name="tag" value="${t}">`)}
<label>tag<input name="tag" value="${query.tags?.[0] ?? ''}" placeholder="any"></label>
<button type="submit">Filter</button>
<a href="${d.link('/jobs')}">clear</a>
</form>
${jobIdForm(d)}
</div>`;
  const rows = jobs.map(
    (job) => html`<tr data-job-id="${job.id}" data-status="${job.status}">
<td class="mono"><a href="${d.link(`/jobs/${job.id}`)}">${job.id}</a></td>
<td>${job.kind}</td><td>${job.queue}</td><td>${statusPill(job.status)}</td>
<td class="num" data-field="attempts">${job.attempts}/${kindDecides.has(job.id) ? html`<abbr title="${KIND_DECIDES_TITLE}">kind's</abbr>` : job.maxAttempts}</td>
${
  job.status === 'cancelled'
    ? html`<td class="muted" data-field="run-at" title="cancelled: it will not run">—</td>`
    : html`<td class="nowrap" data-field="run-at" title="${formatTime(job.runAt)}">${formatAge(job.runAt, now)}</td>`
}
<td class="nowrap" title="${formatTime(job.createdAt)}">${formatAge(job.createdAt, now)}</td>
<td data-field="tags">${tagLinks(d, job.tags)}</td>
<td class="mono">${truncate(job.lastError ?? '', 120)}</td>
${d.options.readOnly ? '' : html`<td class="nowrap">${jobActions(d, csrfToken, job, back)}</td>`}</tr>`,
  );
  const last = jobs.at(-1);
  const params = (extra: Record<string, string>) =>
    listLink(d, '/jobs', query, ['status', 'queue', 'kind'], extra);
  const pager = html`<div class="pager">
${query.before ? html`<a href="${params({})}">← newest</a>` : ''}
${last && jobs.length >= d.options.pageSize ? html`<a href="${params({ before: last.id })}" rel="next">older →</a>` : ''}
<span class="muted">${jobs.length} shown, newest first${query.before ? html`, ids below ${query.before}` : ''}</span></div>`;
  const table =
    jobs.length === 0
      ? html`<div class="card muted">No jobs match.</div>`
      : html`<table class="jobs"><thead><tr><th>id</th><th>kind</th><th>queue</th><th>status</th><th class="num">attempts</th><th>run at</th><th>created</th><th>tags</th><th>last error</th>${d.options.readOnly ? '' : html`<th></th>`}</tr></thead>
<tbody>${rows}</tbody></table>`;
  return { title: 'Jobs', nav: 'jobs', top: filters, live: html`${table}${pager}` };
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
