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

/** The whole report: machine, settings, table and notes. */
export function renderReport(
  measurements: readonly Measurement[],
  systems: readonly string[],
  machine: MachineInfo,
  notes: readonly string[],
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
    ...(notes.length > 0 ? ['Notes:', '', ...notes.map((n) => `- ${n}`), ''] : []),
  ].join('\n');
}
