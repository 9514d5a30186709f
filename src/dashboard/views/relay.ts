/**
 * The relayed queues on the queues page: per queue a running relay relays,
 * the jobs waiting to be relayed, the relay's lag, the jobs in flight and how
 * many the live relays published.
 */

import type { RelayQueueStats } from '../../skiplock.js';
import { formatDuration } from './format.js';
import { html } from './html.js';
import type { Page } from './layout.js';

/** `page` with a "Relayed queues" table after its live part; `page` itself when no queue is relayed. */
export function withRelayedQueues(page: Page, rows: RelayQueueStats[]): Page {
  if (rows.length === 0) return page;
  const table = html`<h2>Relayed queues</h2>
<table class="relayed">
<thead><tr><th>queue</th><th class="num">relays</th><th class="num">waiting</th><th class="num">lag</th><th class="num">in flight</th><th class="num">published</th></tr></thead>
<tbody>${rows.map(
    (r) => html`<tr data-relayed-queue="${r.queue}">
<td>${r.queue}</td><td class="num" data-field="relays">${r.relays}</td><td class="num" data-field="waiting">${r.waiting}</td>
<td class="num" data-field="lag">${r.lagMs === null ? '—' : formatDuration(r.lagMs)}</td>
<td class="num" data-field="in-flight">${r.inFlight}</td><td class="num" data-field="published">${r.published}</td></tr>`,
  )}</tbody>
</table>`;
  return {
    ...page,
    live: html`${page.live}
${table}`,
  };
}
