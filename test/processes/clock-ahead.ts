/**
 * Preload (`--import`) that moves this process's wall clock CLOCK_AHEAD_MS
 * ahead: `Date.now()` and `new Date()` read the future. Monotonic timers and
 * times parsed from the database are untouched, as on a host whose clock is
 * wrong.
 */
const aheadMs = Number(process.env.CLOCK_AHEAD_MS ?? 0);
const RealDate = Date;

class AheadDate extends RealDate {
  constructor(...args: unknown[]) {
    if (args.length === 0) super(RealDate.now() + aheadMs);
    else super(...(args as [string]));
  }

  static override now(): number {
    return RealDate.now() + aheadMs;
  }
}

globalThis.Date = AheadDate as DateConstructor;
