/**
 * Figures and the markdown report: every figure is the median of its runs with
 * the min–max range, and each peer's figure also shows skiplock / peer.
 */

/** One figure of one system in one case, measured once per run. */
export interface Measurement {
  /** Scenario number and title, e.g. `2. Drain`. */
  scenario: string;
  /** What was measured, e.g. `20,000 jobs, 1 process, concurrency 50`. */
  case: string;
  /** Unit and direction, e.g. `jobs/s` or `ms (lower is better)`. */
  unit: string;
  system: string;
  /**
   * Names a figure a target is judged by (e.g. `drain.best`), so that the
   * targets section finds it whatever the case's sizes.
   */
  tag?: string;
  /** One value per run. */
  samples: number[];
}

/** The machine and settings, printed above the table. */
export interface MachineInfo {
  lines: string[];
}

/** The value at quantile `q` (0–1) of `values`, by nearest rank; NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** The median of `values` (mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function format(value: number): string {
  // +∞: a latency of a job that never ran within the run.
  if (value === Number.POSITIVE_INFINITY) return '∞';
  if (!Number.isFinite(value)) return '–';
  if (Math.abs(value) >= 100) return Math.round(value).toLocaleString('en-US');
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

function cell(samples: readonly number[]): string {
  if (samples.length === 0) return '–';
  const mid = format(median(samples));
  if (samples.length === 1) return mid;
  return `${mid} (${format(Math.min(...samples))}–${format(Math.max(...samples))})`;
}

/**
 * The results as one markdown table: a row per case, a column per system;
 * a peer's cell ends with skiplock / peer of the medians.
 */
export function renderTable(measurements: readonly Measurement[], systems: readonly string[]): string {
  const present = systems.filter((s) => measurements.some((m) => m.system === s));
  const header = `| scenario | case | unit | ${present.join(' | ')} |`;
  const rule = `|${' --- |'.repeat(3 + present.length)}`;
  const rows: string[] = [];
  const ordered = [...measurements].sort(
    (a, b) => Number.parseInt(a.scenario, 10) - Number.parseInt(b.scenario, 10),
  );
  const keys = [...new Set(ordered.map((m) => `${m.scenario}\u0000${m.case}\u0000${m.unit}`))];
  for (const key of keys) {
    const [scenario, kase, unit] = key.split('\u0000') as [string, string, string];
    const of = (system: string) =>
      measurements.find(
        (m) => m.scenario === scenario && m.case === kase && m.unit === unit && m.system === system,
      );
    const base = of('skiplock');
    const cells = present.map((system) => {
      const m = of(system);
      if (!m) return '';
      const text = cell(m.samples);
      if (system === 'skiplock' || !base || base.samples.length === 0) return text;
      const ratio = median(base.samples) / median(m.samples);
      return Number.isFinite(ratio) && ratio > 0 ? `${text} · **${ratio.toFixed(2)}×**` : text;
    });
    rows.push(`| ${scenario} | ${kase} | ${unit} | ${cells.join(' | ')} |`);
  }
  return [header, rule, ...rows].join('\n');
}

/** Which peers a target compares against. */
export interface TargetPeers {
  /** Every peer (not skiplock, raw-pg or pgbench). */
  peers: readonly string[];
  /** The peers that keep their jobs in PostgreSQL. */
  postgres: readonly string[];
}

interface Target {
  goal: string;
  /** The figure judged, or undefined when this run did not measure it. */
  value: number | undefined;
  limit: number;
  /** `min`: the value must reach the limit; `max`: it must stay at or below it. */
  kind: 'min' | 'max';
  show(v: number): string;
  /** The figures behind the value. */
  detail: string;
}

const times = (v: number) => `${v.toFixed(2)}×`;
const percent = (v: number) => `${Math.round(v * 100)} %`;
const ms = (v: number) => `${format(v)} ms`;

/**
 * Each target of the benchmark, judged from the figures of this run (tagged
 * measurements): met or missed, and by how much.
 */
export function renderTargets(measurements: readonly Measurement[], peers: TargetPeers): string {
  const fig = (tag: string, system: string): number | undefined => {
    const m = measurements.find((x) => x.tag === tag && x.system === system && x.samples.length > 0);
    if (!m) return undefined;
    const v = median(m.samples);
    return Number.isNaN(v) ? undefined : v;
  };
  const ratio = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined || b === 0 ? undefined : a / b;
  /** The peer with the best median of `tag` (highest, or lowest when `lowest`). */
  const bestPeer = (tag: string, among: readonly string[], lowest = false) => {
    let best: { system: string; value: number } | undefined;
    for (const system of among) {
      const value = fig(tag, system);
      if (value === undefined) continue;
      if (!best || (lowest ? value < best.value : value > best.value)) best = { system, value };
    }
    return best;
  };
  const f = (v: number | undefined, unit = '') => (v === undefined ? '–' : `${format(v)}${unit}`);
  const targets: Target[] = [];

  const defaults = fig('drain.defaults-vs-best', 'skiplock');
  const gwBest = fig('drain.defaults-vs-best', 'graphile-worker');
  targets.push({
    goal: "drain, skiplock's defaults (1 × 10) ≥ 1.5× graphile-worker's best row",
    value: ratio(defaults, gwBest),
    limit: 1.5,
    kind: 'min',
    show: times,
    detail: `${f(defaults)} vs ${f(gwBest)} jobs/s`,
  });
  const best = fig('drain.best-vs-bare', 'skiplock');
  const ceiling = fig('drain.best-vs-bare', 'raw-pg');
  targets.push({
    goal: "drain, skiplock's best row ≥ 80 % of the bare loop at its claim size (skiplock's own claim and fenced DELETE on 2 or 4 connections, forked and started like the drain rows, run beside them)",
    value: ratio(best, ceiling),
    limit: 0.8,
    kind: 'min',
    show: percent,
    detail: `${f(best)} vs ${f(ceiling)} jobs/s`,
  });
  const relays = [fig('relay.1', 'skiplock'), fig('relay.2', 'skiplock')].filter((v) => v !== undefined);
  const relayBest = relays.length > 0 ? Math.max(...relays) : undefined;
  const relayCeiling = fig('relay.database-ceiling', 'raw-pg');
  targets.push({
    goal: 'relay: the faster of 1 and 2 relays ≥ 80 % of the bare DELETE … SKIP LOCKED at the same batch size (100, 1 connection)',
    value: ratio(relayBest, relayCeiling),
    limit: 0.8,
    kind: 'min',
    show: percent,
    detail: `${f(relayBest)} vs ${f(relayCeiling)} jobs/s; the broker alone took ${f(fig('relay.broker-ceiling', 'skiplock'))} jobs/s`,
  });
  for (const [q, limit] of [
    ['p50', 3],
    ['p99', 6],
  ] as const) {
    const own = fig(`latency.${q}`, 'skiplock');
    targets.push({
      goal: `idle latency ${q} ≤ ${limit} ms`,
      value: own,
      limit,
      kind: 'max',
      show: ms,
      detail: '',
    });
  }
  for (const q of ['p50', 'p95', 'p99'] as const) {
    const own = fig(`latency.${q}`, 'skiplock');
    const peer = bestPeer(`latency.${q}`, peers.postgres, true);
    targets.push({
      goal: `idle latency ${q} below every PostgreSQL peer`,
      value: ratio(own, peer?.value),
      limit: 1,
      kind: 'max',
      show: times,
      detail: `${f(own, ' ms')} vs ${peer ? `${peer.system} ${f(peer.value, ' ms')}` : '–'}`,
    });
  }
  for (const size of [1_000, 20_000, 100_000]) {
    const own = fig(`enqueue.bulk.${size}`, 'skiplock');
    const peer = bestPeer(`enqueue.bulk.${size}`, peers.peers);
    targets.push({
      goal: `bulk enqueue of ${size.toLocaleString('en-US')} ≥ 1.2× the best peer`,
      value: ratio(own, peer?.value),
      limit: 1.2,
      kind: 'min',
      show: times,
      detail: `${f(own)} vs ${peer ? `${peer.system} ${f(peer.value)}` : '–'} jobs/s`,
    });
  }
  const size = fig('size.ratio', 'skiplock');
  targets.push({
    goal: "table size: drain with 2,000,000 other rows (quick: 200,000) ≥ 90 % of the empty table's",
    value: size,
    limit: 0.9,
    kind: 'min',
    show: percent,
    detail: 'median of the per-run ratios',
  });
  targets.push({
    goal: "volume: the hot table's drain beside 10,000,000 archived rows ≥ 90 % of the same drain on an empty database",
    value: fig('volume.drain-ratio', 'skiplock'),
    limit: 0.9,
    kind: 'min',
    show: percent,
    detail: 'median of the per-run ratios',
  });
  for (const [tag, what] of [
    ['snapshot.steady-ratio', 'steady rate during / before'],
    ['snapshot.drain-ratio', 'drain with / without'],
  ] as const) {
    targets.push({
      goal: `held snapshot: ${what} ≥ 80 %`,
      value: fig(tag, 'skiplock'),
      limit: 0.8,
      kind: 'min',
      show: percent,
      detail: 'median of the per-run ratios',
    });
  }
  const pages = measurements.filter(
    (m) => m.tag === 'volume.page' && m.system === 'skiplock' && m.samples.length > 0,
  );
  targets.push({
    goal: 'volume: stats(), queues(), listJobs pages and every dashboard page ≤ 200 ms',
    value: pages.length > 0 ? Math.max(...pages.map((m) => median(m.samples))) : undefined,
    limit: 200,
    kind: 'max',
    show: (v) => `${v.toFixed(0)} ms`,
    detail: 'the slowest median',
  });
  const band = fig('memory.band', 'skiplock');
  const spread = fig('memory.spread', 'skiplock');
  targets.push({
    goal: 'memory: RSS flat (± 10 %) across the drain',
    value: band,
    limit: 10,
    kind: 'max',
    show: (v) => `± ${v.toFixed(1)} %`,
    detail: `(max − min) / (max + min) of the samples from 10 % of the drain on; max / min − 1 is ${
      spread === undefined ? 'not measured' : `${spread.toFixed(1)} %`
    }`,
  });

  const rows = targets.map((t) => {
    if (t.value === undefined || !Number.isFinite(t.value))
      return `| ${t.goal} | not measured in this run | – |`;
    const met = t.kind === 'min' ? t.value >= t.limit : t.value <= t.limit;
    // How far from the limit, relative to it: margin when met, shortfall when missed.
    const off = Math.abs(t.value - t.limit) / t.limit;
    const verdict = met
      ? `met (${Math.round(off * 100)} % to spare)`
      : `**missed** by ${Math.round(off * 100)} % (${t.show(t.value)} against ${t.kind === 'min' ? '≥' : '≤'} ${t.show(t.limit)})`;
    return `| ${t.goal} | ${t.show(t.value)}${t.detail ? ` (${t.detail})` : ''} | ${verdict} |`;
  });
  return ['| target | this run | met? |', '| --- | --- | --- |', ...rows].join('\n');
}

/** The whole report: machine, settings, table, targets and notes. */
export function renderReport(
  measurements: readonly Measurement[],
  systems: readonly string[],
  machine: MachineInfo,
  notes: readonly string[],
  peers: TargetPeers = { peers: [], postgres: [] },
): string {
  return [
    '# skiplock benchmark results',
    '',
    ...machine.lines.map((l) => `- ${l}`),
    '',
    'Each cell: median (min–max) of the runs; in a peer column, **N×** is skiplock / peer',
    '(above 1 is better for skiplock in jobs/s, below 1 is better in ms).',
    '',
    renderTable(measurements, systems),
    '',
    '## Targets',
    '',
    'Judged from the figures above (medians); "missed by" is the distance to the target, relative to it.',
    '',
    renderTargets(measurements, peers),
    '',
    ...(notes.length > 0 ? ['Notes:', '', ...notes.map((n) => `- ${n}`), ''] : []),
  ].join('\n');
}
