/**
 * The schedules page: every cron schedule with its rule, time zone, what it
 * enqueues and where, its next slot (or why it is parked), and its last slot
 * with a link to that job while the job is stored.
 */
import type { ScheduleInfo } from '../../schedule/schedule-options.js';
import type { Dashboard } from '../context.js';
import { formatAge, formatTime } from './format.js';
import { type Html, html } from './html.js';
import { type Page, statusPill } from './layout.js';

const PAYLOAD_CHARS = 60;

/** The schedules page from `schedules()`; `stored`: the last job ids still in the jobs table or archive. */
export function schedulesPage(d: Dashboard, schedules: ScheduleInfo[], stored: ReadonlySet<string>): Page {
  const now = Date.now();
  const when = (at: Date | null, field: string) =>
    at
      ? html`<td class="nowrap" data-field="${field}" data-at="${at.toISOString()}">${formatTime(at)}<br><span class="muted">${formatAge(at, now)}</span></td>`
      : html`<td class="muted" data-field="${field}">never</td>`;
  const lastJob = (id: string | null) => {
    if (id === null) return html`<span class="muted">—</span>`;
    if (stored.has(id)) return html`<a href="${d.link(`/jobs/${id}`)}">${id}</a>`;
    return html`${id} <span class="muted" title="not in the jobs table or the archive: succeeded and deleted (the default onSuccess), pruned, or deleted">(no longer stored)</span>`;
  };
  const nextRun = (s: ScheduleInfo) =>
    s.parkedReason === null
      ? when(s.nextRunAt, 'next-run')
      : html`<td data-field="next-run" data-parked="true">${statusPill('parked')}<br><span class="muted" data-field="parked-reason">${s.parkedReason}</span><br><span class="muted">no jobs until the schedule is saved again (<code>schedule()</code>) or its row updated</span></td>`;
  const rows = schedules.map((s) => {
    const payload = JSON.stringify(s.payload) ?? 'null';
    return html`<tr data-schedule="${s.name}"${s.parkedReason === null ? '' : html` data-parked="true"`}>
<td class="mono nowrap" data-field="name">${s.name}</td>
<td class="mono nowrap" data-field="cron">${s.cron}</td>
<td data-field="timezone">${s.timezone}</td>
<td data-field="kind">${s.kind}</td>
<td><a href="${d.link(`/jobs?${new URLSearchParams({ queue: s.queue })}`)}" data-field="queue">${s.queue}</a></td>
<td class="mono" data-field="payload" title="${payload.length > PAYLOAD_CHARS ? payload : ''}">${truncate(payload)}</td>
${nextRun(s)}${when(s.lastRunAt, 'last-run')}
<td class="mono" data-field="last-job">${lastJob(s.lastJobId)}</td>
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
