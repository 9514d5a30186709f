/** The coalescing of one attempt's progress writes, on a fake clock. */
import { describe, expect, it } from 'vitest';
import { PROGRESS_WRITE_INTERVAL_MS, ProgressWriter } from '../../src/workflow/progress-writer.js';
import { fakeClock } from '../support/fake-clock.js';

/** A sink that records each write and answers when the test says. */
function recordingSink() {
  const clock = fakeClock();
  const writes: { progress: string | null; lines: string[] }[] = [];
  type Outcome = 'written' | 'locked' | 'lost';
  let answer: (outcome: Outcome) => void = () => {};
  return {
    clock,
    writes,
    answer: (outcome: Outcome) => answer(outcome),
    sink: {
      clock,
      write: (_attempt: unknown, progress: string | null, lines: string[]) => {
        writes.push({ progress, lines });
        return new Promise<Outcome>((resolve) => {
          answer = resolve;
        });
      },
    },
  };
}

describe('ProgressWriter', () => {
  it('writes at once, then at most once per interval, carrying the newest value and every line', async () => {
    const { clock, writes, answer, sink } = recordingSink();
    const writer = new ProgressWriter(sink, {});
    const first = writer.progress(1);
    await clock.tick(0);
    expect(writes).toEqual([{ progress: '1', lines: [] }]);
    const later = [writer.progress(2), writer.log('a'), writer.progress(3), writer.log('b')];
    answer('written');
    expect(await first).toBe(true);
    // One in flight, then the interval: nothing yet.
    await clock.tick(PROGRESS_WRITE_INTERVAL_MS - 1);
    expect(writes).toHaveLength(1);
    await clock.tick(1);
    expect(writes).toEqual([
      { progress: '1', lines: [] },
      { progress: '3', lines: ['a', 'b'] },
    ]);
    answer('lost');
    expect(await Promise.all(later)).toEqual([false, false, false, false]);
    expect(clock.pending()).toBe(0);
  });

  it('keeps a write in flight alone: values reported meanwhile wait for it', async () => {
    const { clock, writes, answer, sink } = recordingSink();
    const writer = new ProgressWriter(sink, {});
    void writer.progress('a');
    await clock.tick(0);
    void writer.progress('b');
    await clock.tick(10 * PROGRESS_WRITE_INTERVAL_MS);
    expect(writes.map((w) => w.progress)).toEqual(['"a"']);
    answer('written');
    await clock.tick(0);
    expect(writes.map((w) => w.progress)).toEqual(['"a"', '"b"']);
  });

  it('carries what a locked row refused into the next write, telling its callers false at once; the last write gives it up', async () => {
    const { clock, writes, answer, sink } = recordingSink();
    const writer = new ProgressWriter(sink, {});
    const refused = [writer.log('one'), writer.progress(1)];
    await clock.tick(0);
    answer('locked');
    expect(await Promise.all(refused)).toEqual([false, false]);
    void writer.log('two');
    await clock.tick(PROGRESS_WRITE_INTERVAL_MS);
    expect(writes.at(-1)).toEqual({ progress: '1', lines: ['one', 'two'] });
    answer('locked');
    await clock.tick(0);
    // The attempt ends: one last try, whatever it answers.
    const flushed = writer.flush();
    await clock.tick(0);
    expect(writes.at(-1)).toEqual({ progress: '1', lines: ['one', 'two'] });
    answer('locked');
    await flushed;
    expect(writer.pending).toBe(false);
    expect(clock.pending()).toBe(0);
  });
});
