import { describe, expectTypeOf, it } from 'vitest';
import type { EnqueuedJob, ScheduleInfo, Skiplock } from '../src/index.js';

type Jobs = {
  reindex: { shopId: number };
  report: { to: string };
};
declare const skiplock: Skiplock<Jobs>;

describe('unique options and schedules', () => {
  it('types unique options and the duplicate flag', () => {
    expectTypeOf(skiplock.enqueue('reindex', { shopId: 1 }, { uniqueKey: 'k' })).resolves.toEqualTypeOf<
      EnqueuedJob<'reindex', { shopId: number }>
    >();
    expectTypeOf<EnqueuedJob['duplicate']>().toEqualTypeOf<boolean>();
    void skiplock.enqueue(
      'reindex',
      { shopId: 1 },
      { uniqueKey: 'k', uniqueStates: ['queued'], onConflict: 'replace' },
    );
    // @ts-expect-error: not a conflict mode
    void skiplock.enqueue('reindex', { shopId: 1 }, { uniqueKey: 'k', onConflict: 'merge' });
    // @ts-expect-error: not a status
    void skiplock.enqueue('reindex', { shopId: 1 }, { uniqueKey: 'k', uniqueStates: ['paused'] });
    void skiplock.enqueueMany([
      { kind: 'reindex', payload: { shopId: 1 }, uniqueKey: 'k', onConflict: 'skip' },
    ]);
  });

  it('types schedule by the kind → payload map', () => {
    expectTypeOf(
      skiplock.schedule('r', '0 * * * *', 'report', { to: 'ops' }),
    ).resolves.toEqualTypeOf<ScheduleInfo>();
    void skiplock.schedule(
      'r',
      '0 * * * *',
      'report',
      { to: 'ops' },
      { timezone: 'Europe/Berlin', overlap: 'allow', catchUp: 'all', catchUpMs: 1000 },
    );
    // @ts-expect-error: payload of the other kind
    void skiplock.schedule('r', '0 * * * *', 'report', { shopId: 1 });
    // @ts-expect-error: unknown kind
    void skiplock.schedule('r', '0 * * * *', 'nope', {});
    // @ts-expect-error: not a catch-up mode
    void skiplock.schedule('r', '0 * * * *', 'report', { to: 'ops' }, { catchUp: 'some' });
    expectTypeOf(skiplock.schedules()).resolves.toEqualTypeOf<ScheduleInfo[]>();
    expectTypeOf(skiplock.unschedule('r')).resolves.toEqualTypeOf<boolean>();
  });
});
