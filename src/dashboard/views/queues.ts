/**
 * The queues page: jobs per queue and status, which queues are paused (with
 * Pause and Resume buttons), the oldest due job's age, its limits (and, for a
 * queue with group limits, its keys with running jobs and the busiest of
 * them), and finished jobs per minute over the last hour.
 */

import { JOB_STATUSES } from '../../job/job.js';
import type { QueueInfo } from '../../operations/queues.js';
import type { QueueStats } from '../../skiplock.js';
import type { Dashboard } from '../context.js';
import type { GroupLoad, ThroughputBucket } from '../queries.js';
import { throughputChart } from './chart.js';
import { formatDuration, formatTime } from './format.js';
import { type Html, html } from './html.js';
import { actionButton, type Page, statusPill } from './layout.js';

/** The queues page from `stats()`, `queues()` (paused or not), the chart's buckets and the grouped queues' running keys. */
export function queuesPage(
  d: Dashboard,
  csrfToken: string,
  stats: QueueStats[],
  infos: QueueInfo[],
  buckets: ThroughputBucket[],
  groupLoad: ReadonlyMap<string, GroupLoad> = new Map(),
): Page {
  // A paused queue without jobs has no stats row but is still listed, so it can be resumed.
  const queues = [...new Set([...stats.map((s) => s.queue), ...infos.map((q) => q.name)])].sort();
  const paused = new Map(infos.filter((q) => q.paused).map((q) => [q.name, q.pausedAt]));
  const limits = new Map(infos.map((q) => [q.name, q.limits]));
  const count = (queue: string, status: string) =>
    stats.find((s) => s.queue === queue && s.status === status)?.count ?? 0;
  // Large groups of finished jobs are counted from a sample: shown as ≈n.
  const estimated = (queue: string | undefined, status: string) =>
    stats.some((s) => (queue === undefined || s.queue === queue) && s.status === status && s.estimated);
  const cell = (queue: string | undefined, status: string, n: number) => {
    const query = new URLSearchParams({ status, ...(queue === undefined ? {} : { queue }) });
    const about = estimated(queue, status);
    const text = about ? `≈${n}` : `${n}`;
    return html`<td class="num${n === 0 ? ' zero' : ''}" data-queue="${queue ?? '*'}" data-status="${status}"${about ? html` data-estimated title="estimated from a sample of the table"` : ''}>${n === 0 ? '0' : html`<a href="${d.link(`/jobs?${query}`)}">${text}</a>`}</td>`;
  };
  const rows = queues.map((queue) => {
    const oldest = stats.find((s) => s.queue === queue && s.status === 'queued')?.oldestQueuedAgeMs ?? null;
    const stuck = count(queue, 'dead') + count(queue, 'failed');
    const stuckText = estimated(queue, 'dead') || estimated(queue, 'failed') ? `≈${stuck}` : `${stuck}`;
    const requeue =
      stuck > 0
        ? actionButton(d, csrfToken, {
            path: '/queues/requeue',
            label: `Requeue ${stuckText} dead/failed`,
            confirm: `Requeue all ${stuckText} dead and failed jobs of queue "${queue}"?`,
            fields: { queue },
          })
        : '';
    const isPaused = paused.has(queue);
    const pausedAt = paused.get(queue);
    const toggle = actionButton(
      d,
      csrfToken,
      isPaused
        ? {
            path: '/queues/resume',
            label: 'Resume',
            confirm: `Resume queue "${queue}"? Workers claim its jobs again at once.`,
            fields: { queue },
          }
        : {
            path: '/queues/pause',
            label: 'Pause',
            confirm: `Pause queue "${queue}"? Workers claim no more of its jobs until it is resumed; running jobs finish.`,
            danger: true,
            fields: { queue },
          },
    );
    return html`<tr data-queue-row="${queue}" data-paused="${isPaused ? 'true' : 'false'}">
<td><a href="${d.link(`/jobs?${new URLSearchParams({ queue })}`)}">${queue}</a>${
      isPaused
        ? html` <span title="${pausedAt ? `paused since ${formatTime(pausedAt)}` : 'paused'}">${statusPill('paused')}</span>`
        : ''
    }</td>
${JOB_STATUSES.map((status) => cell(queue, status, count(queue, status)))}
<td class="num" data-queue="${queue}" data-oldest-due>${oldest === null ? '—' : formatDuration(oldest)}</td>
<td class="nowrap" data-queue="${queue}" data-limits>${limitsCell(limits.get(queue), groupLoad.get(queue))}</td>
${d.options.readOnly ? '' : html`<td class="nowrap">${toggle}${requeue}</td>`}</tr>`;
  });
  const totals = JOB_STATUSES.map((status) =>
    cell(
      undefined,
      status,
      stats.filter((s) => s.status === status).reduce((n, s) => n + s.count, 0),
    ),
  );
  const table: Html =
    queues.length === 0
      ? html`<div class="card muted">No jobs in the table and no paused queue.</div>`
      : html`<table class="queues">
<thead><tr><th>queue</th>${JOB_STATUSES.map((s) => html`<th class="num">${s}</th>`)}<th class="num">oldest due</th><th>limits</th>${d.options.readOnly ? '' : html`<th></th>`}</tr></thead>
<tbody>${rows}<tr class="total"><td>all queues</td>${totals}<td></td><td></td>${d.options.readOnly ? '' : html`<td></td>`}</tr></tbody>
</table>`;
  // Succeeded jobs are deleted by default: with none stored, zeros would read as "nothing ran".
  const succeededStored =
    stats.some((s) => s.status === 'succeeded' && s.count > 0) || buckets.some((b) => b.succeeded > 0);
  const note = succeededStored
    ? ''
    : html`<div class="card muted" data-field="succeeded-note">No succeeded jobs are stored, so none are counted above or in the chart: a job that succeeds is deleted by default (<code>onSuccess: 'delete'</code>). To see them here, keep or archive them (<code>onSuccess: 'keep'</code> or <code>'archive'</code>, with <code>retentionMs</code> to prune); for throughput, read the workers' <code>/metrics</code> counters.</div>`;
  return {
    title: 'Queues',
    nav: 'queues',
    top: html`<h1>Queues</h1>`,
    live: html`${table}
${note}
<h2>Finished jobs per minute, last hour</h2>
<div class="card">${throughputChart(buckets)}</div>`,
  };
}

/** Whether a queue has group limits (its jobs are claimed per group key). */
export function isGrouped(limits: QueueInfo['limits']): boolean {
  return limits.groupConcurrency !== null || limits.groupRate !== null || limits.strictOrder;
}

/** A queue's global limits in words ('' for none): `≤ 3 running · 50 starts / 1 s`. */
function limitsText(limits: QueueInfo['limits']): string {
  const parts: string[] = [];
  if (limits.concurrency !== null) parts.push(`≤ ${limits.concurrency} running`);
  if (limits.rate !== null)
    parts.push(`${limits.rate.count} starts / ${formatDuration(limits.rate.periodMs)}`);
  return parts.join(' · ');
}

/** A queue's group limits in words ('' for none): `per key ≤ 1 running · 5 starts / 1 s · in order`. */
function groupLimitsText(limits: QueueInfo['limits']): string {
  const parts: string[] = [];
  if (limits.groupConcurrency !== null) parts.push(`≤ ${limits.groupConcurrency} running`);
  if (limits.groupRate !== null)
    parts.push(`${limits.groupRate.count} starts / ${formatDuration(limits.groupRate.periodMs)}`);
  if (limits.strictOrder) parts.push('in order');
  return parts.length === 0 ? '' : `per key ${parts.join(' · ')}`;
}

/** The limits cell: global limits, group limits, and a grouped queue's running keys. */
function limitsCell(limits: QueueInfo['limits'] | undefined, load: GroupLoad | undefined): Html | string {
  if (limits === undefined) return html`<span class="muted">—</span>`;
  const global = limitsText(limits);
  if (!isGrouped(limits)) return global || html`<span class="muted">—</span>`;
  const keys = load
    ? html`${load.keysRunning} ${load.keysRunning === 1 ? 'key' : 'keys'} running; busiest: ${load.busiest.map(
        (b, i) => html`${i > 0 ? ', ' : ''}<span class="mono">${b.key}</span> (${b.running})`,
      )}`
    : 'no key running';
  return html`${global ? html`<div>${global}</div>` : ''}<div data-group-limits>${groupLimitsText(limits)}</div><div class="muted" data-group-keys>${keys}</div>`;
}
