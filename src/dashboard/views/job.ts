/**
 * One job: its fields, lease holder, last error and pretty-printed payload,
 * and the actions its state allows.
 */
import type { JobRecord } from '../../job/job.js';
import type { Dashboard } from '../context.js';
import { formatAge, formatPayload, formatTime } from './format.js';
import { html } from './html.js';
import { jobActions, KIND_DECIDES_TITLE, tagLinks } from './jobs.js';
import { type Page, statusPill } from './layout.js';

/** The failed attempts, newest first, each error's first line (the whole text on hover). */
function attemptErrors(job: JobRecord) {
  const rows = job.errors.toReversed().map(
    (e) => html`<tr><td class="num">${e.attempt}</td><td class="nowrap">${formatTime(e.at)}</td>
<td class="mono">${e.workerId ?? '—'}</td><td class="mono" title="${e.error}">${e.error.split('\n', 1)[0]!}</td></tr>`,
  );
  return html`<h2>Failed attempts</h2>
<table class="jobs" data-field="errors"><thead><tr><th class="num">attempt</th><th>at</th><th>worker</th><th>error</th></tr></thead>
<tbody>${rows}</tbody></table>`;
}

/** A job's parents or children, each a link to its page with its status; nothing when there are none. */
function jobLinks(d: Dashboard, label: string, field: string, jobs: JobRecord['dependsOn']) {
  if (!jobs || jobs.length === 0) return '';
  const links = jobs.map(
    (j) =>
      html`<a class="mono" href="${d.link(`/jobs/${j.id}`)}">${j.id}</a> <span class="mono">${j.kind}</span> ${j.status ? statusPill(j.status) : html`<span class="muted">gone</span>`}<br>`,
  );
  return html`<dt>${label}</dt><dd data-field="${field}">${links}</dd>`;
}

/**
 * The job page; `archived` when the row was found in `jobs_archive`;
 * `kindDecides` when its attempt limit is its kind's, not yet known.
 */
export function jobPage(
  d: Dashboard,
  csrfToken: string,
  job: JobRecord,
  archived: boolean,
  kindDecides = false,
): Page {
  const now = Date.now();
  const time = (at: Date | null) =>
    at ? html`${formatTime(at)} <span class="muted">(${formatAge(at, now)})</span>` : html`—`;
  const fields = html`<dl class="fields">
<dt>status</dt><dd>${statusPill(job.status)}${archived ? html` ${statusPill('archived')}` : ''}</dd>
<dt>kind</dt><dd class="mono" data-field="kind">${job.kind}</dd>
<dt>queue</dt><dd class="mono" data-field="queue">${job.queue}</dd>
<dt>priority</dt><dd>${job.priority}</dd>
<dt>attempts</dt><dd data-field="attempts">${job.attempts} of ${kindDecides ? html`<abbr title="${KIND_DECIDES_TITLE}">the kind's maxAttempts</abbr> <span class="muted">(set at the first claim; 20 when its handler gives none)</span>` : job.maxAttempts}</dd>
<dt>run at</dt><dd data-field="run-at">${job.status === 'cancelled' ? html`${formatTime(job.runAt)} <span class="muted">(cancelled: it will not run)</span>` : time(job.runAt)}</dd>
<dt>created at</dt><dd>${time(job.createdAt)}</dd>
${job.startBy ? html`<dt>start by</dt><dd data-field="start-by">${time(job.startBy)} <span class="muted">(not started by then, it never runs)</span></dd>` : ''}
<dt>group key</dt><dd class="mono" data-field="group-key">${job.groupKey ?? html`<span class="muted">none</span>`}</dd>
<dt>tags</dt><dd data-field="tags">${job.tags.length === 0 ? html`<span class="muted">none</span>` : tagLinks(d, job.tags)}</dd>
<dt>finished at</dt><dd>${time(job.finishedAt)}</dd>
${job.cancelRequestedAt ? html`<dt>cancel requested</dt><dd data-field="cancel-requested-at">${time(job.cancelRequestedAt)}</dd>` : ''}
<dt>locked at</dt><dd>${time(job.lockedAt)}</dd>
<dt>lease holder</dt><dd class="mono">${job.lockedBy ?? '—'}</dd>
<dt>claims ever</dt><dd>${job.leaseSeq}</dd>
${jobLinks(d, 'depends on', 'depends-on', job.dependsOn)}
${jobLinks(d, 'children', 'children', job.children)}
</dl>`;
  const back = `/jobs/${job.id}`;
  return {
    title: `Job ${job.id}`,
    nav: 'jobs',
    top: html`<h1>Job <span class="mono">${job.id}</span></h1>`,
    live: html`<div class="card">${fields}
${archived || d.options.readOnly ? '' : html`<div class="actions">${jobActions(d, csrfToken, job, back)}</div>`}</div>
<h2>Last error</h2>
${job.lastError === null ? html`<p class="muted">none</p>` : html`<pre class="error" data-field="last-error">${job.lastError}</pre>`}
${job.errors.length === 0 ? '' : attemptErrors(job)}
<h2>Payload</h2>
<pre data-field="payload">${formatPayload(job.payload)}</pre>
${output(job)}`,
  };
}

/** The handler's result, progress and log lines, when it left any (all escaped, as the payload). */
function output(job: JobRecord) {
  const logs = job.logs ?? [];
  return html`${
    job.result == null
      ? ''
      : html`<h2>Result</h2>
<pre data-field="result">${formatPayload(job.result)}</pre>`
  }
${
  job.progress == null
    ? ''
    : html`<h2>Progress</h2>
<pre data-field="progress">${formatPayload(job.progress)}</pre>`
}
${
  logs.length === 0
    ? ''
    : html`<h2>Log</h2>
<table class="jobs" data-field="logs"><thead><tr><th>at</th><th>line</th></tr></thead>
<tbody>${logs.map((l) => html`<tr><td class="nowrap">${formatTime(l.at)}</td><td class="mono">${l.line}</td></tr>`)}</tbody></table>`
}`;
}
