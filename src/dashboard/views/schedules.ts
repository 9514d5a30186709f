/**
 * The schedules page: every cron schedule with its rule, time zone, what it
 * enqueues and where, its next slot, and its last slot with a link to that job.
 */
import type { ScheduleInfo } from '../../schedule/schedule-options.js';
import type { Dashboard } from '../context.js';
import { formatAge, formatTime } from './format.js';
import { type Html, html } from './html.js';
import type { Page } from './layout.js';

const PAYLOAD_CHARS = 60;

/** The schedules page from `schedules()`. */
export function schedulesPage(d: Dashboard, schedules: ScheduleInfo[]): Page {
  const now = Date.now();
  const when = (at: Date | null, field: string) =>
    at
      ? html`<td class="nowrap" data-field="${field}" data-at="${at.toISOString()}">${formatTime(at)}<br><span class="muted">${formatAge(at, now)}</span></td>`
      : html`<td class="muted" data-field="${field}">never</td>`;
  const rows = schedules.map((s) => {
    const payload = JSON.stringify(s.payload) ?? 'null';
    return html`<tr data-schedule="${s.name}">
<td class="mono nowrap" data-field="name">${s.name}</td>
<td class="mono nowrap" data-field="cron">${s.cron}</td>
<td data-field="timezone">${s.timezone}</td>
<td data-field="kind">${s.kind}</td>
<td><a href="${d.link(`/jobs?${new URLSearchParams({ queue: s.queue })}`)}" data-field="queue">${s.queue}</a></td>
<td class="mono" data-field="payload" title="${payload.length > PAYLOAD_CHARS ? payload : ''}">${truncate(payload)}</td>
${when(s.nextRunAt, 'next-run')}${when(s.lastRunAt, 'last-run')}
<td class="mono" data-field="last-job">${s.lastJobId === null ? html`<span class="muted">—</span>` : html`<a href="${d.link(`/jobs/${s.lastJobId}`)}">${s.lastJobId}</a>`}</td>
</tr>`;
  });
  const table: Html =
    schedules.length === 0
      ? html`<div class="card muted">No schedules. Create one with <code>skiplock.schedule(name, cron, kind, payload)</code> or <code>skiplock schedule</code>.</div>`
      : html`<div class="scroll"><table class="schedules"><thead><tr><th>name</th><th>cron</th><th>time zone</th><th>kind</th><th>queue</th><th>payload</th><th>next run</th><th>last run</th><th>last job</th></tr></thead>
<tbody>${rows}</tbody></table></div>
<p class="muted">Times are the database's clock, shown in UTC; the cron rule reads in the schedule's time zone. Workers enqueue each slot once.</p>`;
  return { title: 'Schedules', nav: 'schedules', top: html`<h1>Schedules</h1>`, live: table };
}

function truncate(text: string): string {
  return text.length > PAYLOAD_CHARS ? `${text.slice(0, PAYLOAD_CHARS - 1)}…` : text;
}
