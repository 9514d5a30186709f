/** Stopping a worker: running handlers finish within the deadline, the rest are given back uncharged. */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ShutdownError } from '../src/index.js';
import { nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate } from './support/gate.js';

const t = useTestDatabase();

const base = { pollIntervalMs: 100, sweepIntervalMs: 600_000 } as const;

/** The run time of the job a stop waits for. */
const SHORT_JOB_MS = 200;

describe('graceful stop', () => {
  it('lets running handlers finish within the deadline', async () => {
    const started = gate();
    const worker = t.worker({
      ...base,
      queues: ['finish'],
      onSuccess: 'keep',
      shutdownTimeoutMs: 10_000,
      handlers: {
        finish: async () => {
          started.open();
          await sleep(SHORT_JOB_MS); // the job's own run time
        },
      },
    });
    await worker.start();
    const job = await t.skiplock.enqueue('finish', {}, { queue: 'finish' });
    await started.opened;
    await worker.stop();
    expect(await t.row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1, locked_by: null });
  });

  it('aborts handlers past the deadline and gives their jobs back without charging the attempt', async () => {
    const started = gate<AbortSignal>();
    const worker = t.worker({
      ...base,
      queues: ['abort'],
      shutdownTimeoutMs: 100,
      handlers: {
        stuck: (_, { signal }) => {
          started.open(signal);
          return new Promise(() => {}); // uncooperative: never settles
        },
      },
    });
    const released = record(worker, 'job:released');
    await worker.start();
    const job = await t.skiplock.enqueue('stuck', {}, { queue: 'abort' });
    const signal = await started.opened;
    await worker.stop();
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(ShutdownError);
    expect(released.map(([j]) => j.id)).toEqual([job.id]);
    expect(await t.row(job.id)).toMatchObject({ status: 'queued', attempts: 0, locked_by: null });
  });

  it('claims nothing after stop: another worker finds the job unclaimed', async () => {
    let ran = 0;
    const stopped = t.worker({ ...base, queues: ['after-stop'], handlers: { x: () => void ran++ } });
    await stopped.start();
    await stopped.stop();
    const job = await t.skiplock.enqueue('x', {}, { queue: 'after-stop' });
    // A second worker claims it as its first attempt: the stopped one never took it.
    const other = t.worker({ ...base, queues: ['after-stop'], onSuccess: 'keep', handlers: { x: () => {} } });
    const succeeded = nextEvent(other, 'job:success');
    await other.start();
    const [done] = await succeeded;
    expect(done).toMatchObject({ id: job.id, attempts: 1 });
    expect(await t.row(job.id)).toMatchObject({ status: 'succeeded', attempts: 1, locked_by: null });
    expect(ran).toBe(0);
    expect(stopped.activeCount).toBe(0);
  });
});
