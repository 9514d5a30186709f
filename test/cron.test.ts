import { describe, expect, it } from 'vitest';
import { ValidationError } from '../src/index.js';
import { dueSlots, ON_TIME_MS, parseCron } from '../src/schedule/cron.js';

/** Every slot of `rule` in [from, to), following the next-slot rule. */
function slotsBetween(cron: string, timezone: string, from: string, to: string): string[] {
  const rule = parseCron(cron, timezone);
  const out: string[] = [];
  for (let s = rule.next(new Date(new Date(from).getTime() - 1)); s && s < new Date(to); s = rule.next(s))
    out.push(s.toISOString());
  return out;
}

describe('the next-slot rule across daylight saving', () => {
  it('Europe/Berlin 30 2 * * *: the skipped 02:30 runs once at 03:00, the repeated one once', () => {
    // 2025-03-30: 02:00 CET jumps to 03:00 CEST.
    expect(
      slotsBetween('30 2 * * *', 'Europe/Berlin', '2025-03-29T00:00:00Z', '2025-04-01T00:00:00Z'),
    ).toEqual([
      '2025-03-29T01:30:00.000Z', // 02:30 CET
      '2025-03-30T01:00:00.000Z', // 03:00 CEST, the first valid instant after the skipped 02:30
      '2025-03-31T00:30:00.000Z', // 02:30 CEST
    ]);
    // 2025-10-26: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice, runs once.
    expect(
      slotsBetween('30 2 * * *', 'Europe/Berlin', '2025-10-25T00:00:00Z', '2025-10-28T00:00:00Z'),
    ).toEqual(['2025-10-25T00:30:00.000Z', '2025-10-26T00:30:00.000Z', '2025-10-27T01:30:00.000Z']);
  });

  it('America/New_York 30 2 * * *: once on the spring day and once on the fall day', () => {
    expect(
      slotsBetween('30 2 * * *', 'America/New_York', '2025-03-09T00:00:00Z', '2025-03-11T00:00:00Z'),
    ).toEqual([
      '2025-03-09T07:00:00.000Z', // 03:00 EDT: 02:30 does not exist
      '2025-03-10T06:30:00.000Z',
    ]);
    // 2025-11-02: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice, runs once.
    expect(
      slotsBetween('30 1 * * *', 'America/New_York', '2025-11-02T00:00:00Z', '2025-11-04T00:00:00Z'),
    ).toEqual([
      '2025-11-02T05:30:00.000Z', // the first 01:30 (EDT)
      '2025-11-03T06:30:00.000Z',
    ]);
  });

  it('an hourly rule keeps its interval through the repeated hour (one slot per elapsed hour)', () => {
    const slots = slotsBetween('0 * * * *', 'Europe/Berlin', '2025-10-26T00:00:00Z', '2025-10-26T03:00:00Z');
    expect(slots).toEqual([
      '2025-10-26T00:00:00.000Z',
      '2025-10-26T01:00:00.000Z',
      '2025-10-26T02:00:00.000Z',
    ]);
  });
});

describe('parseCron', () => {
  it('takes 5 or 6 fields and nicknames', () => {
    expect(parseCron('*/15 * * * *', 'UTC').next(new Date('2025-01-01T00:07:00Z'))?.toISOString()).toBe(
      '2025-01-01T00:15:00.000Z',
    );
    expect(parseCron('*/10 * * * * *', 'UTC').next(new Date('2025-01-01T00:00:01Z'))?.toISOString()).toBe(
      '2025-01-01T00:00:10.000Z',
    );
    expect(parseCron('@hourly', 'UTC').next(new Date('2025-01-01T00:00:00Z'))?.toISOString()).toBe(
      '2025-01-01T01:00:00.000Z',
    );
  });

  it('refuses bad rules and zones, naming the field', () => {
    const cases: [string, string, string][] = [
      ['61 * * * *', 'UTC', 'cron'],
      ['* * *', 'UTC', 'cron'],
      ['0 0 * * * * 2030', 'UTC', 'cron'],
      ['0 0 30 2 *', 'UTC', 'cron'],
      ['', 'UTC', 'cron'],
      ['* * * * *', 'Mars/Olympus_Mons', 'timezone'],
      ['* * * * *', '', 'timezone'],
    ];
    for (const [cron, zone, field] of cases) {
      let error: unknown;
      try {
        parseCron(cron, zone);
      } catch (e) {
        error = e;
      }
      expect(error, `${cron} in ${zone}`).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(field);
    }
  });
});

describe('due slots after downtime', () => {
  const rule = parseCron('0 * * * *', 'UTC');
  const next = new Date('2025-01-01T01:00:00Z');
  const now = new Date('2025-01-01T05:30:00Z'); // slots 01:00 … 05:00 were missed

  it("'latest' enqueues the most recent slot once", () => {
    expect(dueSlots(rule, next, now, 'latest', 86_400_000)).toEqual({
      enqueue: [new Date('2025-01-01T05:00:00Z')],
      nextRunAt: new Date('2025-01-01T06:00:00Z'),
    });
  });

  it("'all' enqueues each missed slot within catchUpMs", () => {
    expect(dueSlots(rule, next, now, 'all', 86_400_000)?.enqueue.map((d) => d.getUTCHours())).toEqual([
      1, 2, 3, 4, 5,
    ]);
    expect(dueSlots(rule, next, now, 'all', 2 * 3_600_000)?.enqueue.map((d) => d.getUTCHours())).toEqual([
      4, 5,
    ]);
  });

  it("'none' enqueues no missed slot, only one on time", () => {
    expect(dueSlots(rule, next, now, 'none', 0)).toEqual({
      enqueue: [],
      nextRunAt: new Date('2025-01-01T06:00:00Z'),
    });
    const onTime = new Date(new Date('2025-01-01T05:00:00Z').getTime() + ON_TIME_MS);
    expect(dueSlots(rule, next, onTime, 'none', 0)?.enqueue).toEqual([new Date('2025-01-01T05:00:00Z')]);
  });

  it('nothing is due before its slot', () => {
    expect(dueSlots(rule, next, new Date('2025-01-01T00:59:59.999Z'), 'all', 86_400_000)).toEqual({
      enqueue: [],
      nextRunAt: next,
    });
  });
});
