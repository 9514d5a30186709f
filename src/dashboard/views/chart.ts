/**
 * Finished jobs per minute over the last hour as an inline SVG bar chart:
 * succeeded and failed/dead stacked per minute, oldest on the left.
 */
import type { ThroughputBucket } from '../queries.js';
import { type Html, html } from './html.js';

const WIDTH = 720;
const HEIGHT = 170;
const LEFT = 36;
const BOTTOM = 20;
const TOP = 8;

/** The chart of 60 one-minute buckets (oldest first). */
export function throughputChart(buckets: ThroughputBucket[]): Html {
  const max = Math.max(1, ...buckets.map((b) => b.succeeded + b.failed));
  const plotHeight = HEIGHT - BOTTOM - TOP;
  const slot = (WIDTH - LEFT) / buckets.length;
  const y = (value: number) => (value / max) * plotHeight;
  const bars = buckets.map((b, i) => {
    const x = LEFT + i * slot + 1;
    const w = Math.max(1, slot - 2);
    const ok = y(b.succeeded);
    const bad = y(b.failed);
    const base = HEIGHT - BOTTOM;
    const when = b.minutesAgo === 0 ? 'this minute' : `${b.minutesAgo} min ago`;
    return html`<g><title>${when}: ${b.succeeded} succeeded, ${b.failed} failed or dead</title>
<rect x="${x.toFixed(1)}" y="${(base - ok).toFixed(1)}" width="${w.toFixed(1)}" height="${ok.toFixed(1)}" fill="#12805c"></rect>
<rect x="${x.toFixed(1)}" y="${(base - ok - bad).toFixed(1)}" width="${w.toFixed(1)}" height="${bad.toFixed(1)}" fill="#c4320a"></rect>
<rect x="${x.toFixed(1)}" y="${TOP}" width="${w.toFixed(1)}" height="${plotHeight}" fill="transparent"></rect></g>`;
  });
  const totalOk = buckets.reduce((n, b) => n + b.succeeded, 0);
  const totalBad = buckets.reduce((n, b) => n + b.failed, 0);
  return html`<div class="chart" data-succeeded="${totalOk}" data-failed="${totalBad}">
<svg viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-label="finished jobs per minute, last hour">
<line x1="${LEFT}" y1="${HEIGHT - BOTTOM}" x2="${WIDTH}" y2="${HEIGHT - BOTTOM}" stroke="#d0d5dd"></line>
<line x1="${LEFT}" y1="${TOP}" x2="${WIDTH}" y2="${TOP}" stroke="#eef0f3" stroke-dasharray="3 3"></line>
<text x="${LEFT - 6}" y="${TOP + 4}" text-anchor="end" font-size="10" fill="#667085">${max}</text>
<text x="${LEFT - 6}" y="${HEIGHT - BOTTOM}" text-anchor="end" font-size="10" fill="#667085">0</text>
<text x="${LEFT}" y="${HEIGHT - 4}" font-size="10" fill="#667085">60 min ago</text>
<text x="${LEFT + (WIDTH - LEFT) / 2}" y="${HEIGHT - 4}" text-anchor="middle" font-size="10" fill="#667085">30 min ago</text>
<text x="${WIDTH}" y="${HEIGHT - 4}" text-anchor="end" font-size="10" fill="#667085">now</text>
${bars}
</svg>
<div class="legend"><span><i class="swatch-ok"></i>succeeded: ${totalOk}</span><span><i class="swatch-bad"></i>failed or dead: ${totalBad}</span>
<span>From <code>finished_at</code> of rows in the jobs table and the archive. Jobs deleted on success (the default) leave no row and are not counted here; see <code>/metrics</code> for worker counters.</span></div>
</div>`;
}
