/**
 * How times, durations and payloads read on the pages.
 */

/** `2024-05-01 12:03:04Z`, or `—` for none. */
export function formatTime(at: Date | null): string {
  if (!at) return '—';
  return `${at.toISOString().slice(0, 19).replace('T', ' ')}Z`;
}

/** A duration for people: `850 ms`, `12 s`, `3 min 20 s`, `2 h 5 min`, `3 d 4 h`. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(abs / 1000);
  const sign = ms < 0 ? '−' : '';
  if (s < 60) return `${sign}${s} s`;
  if (s < 3600) return `${sign}${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${sign}${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${sign}${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

/** How long ago (or, negative, how far ahead) `at` is, relative to `now`. */
export function formatAge(at: Date | null, now: number): string {
  if (!at) return '';
  const ms = now - at.getTime();
  return ms >= 0 ? `${formatDuration(ms)} ago` : `in ${formatDuration(-ms)}`;
}

/** A payload pretty-printed as JSON with two-space indents. */
export function formatPayload(payload: unknown): string {
  return JSON.stringify(payload, null, 2) ?? 'null';
}
