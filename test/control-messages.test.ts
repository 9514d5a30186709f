/**
 * Messages on the workers' channel are hints: any role that can connect can
 * send one. A worker acts only on what the database says (a job's cancel
 * request, a queue's paused flag), and a flood of wake-ups costs it a few
 * coalesced claims, not one claim per message.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { channelName } from '../src/db/sql.js';
import { Skiplock } from '../src/index.js';
import { withClient } from './support/client.js';
import { waitFor } from './support/database.js';
import { nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { blockOnceBuffered, gate } from './support/gate.js';

const t = useTestDatabase();

/** Sends `payloads` on the test schema's channel, each in its own transaction, as a forger would. */
async function forge(payloads: unknown[], transactions: 'each' | 'one' = 'each'): Promise<void> {
  const channel = channelName(t.schema);
  const texts = payloads.map((p) => JSON.stringify(p));
  if (transactions === 'one') {
    await t.query('SELECT pg_notify($1, p) FROM unnest($2::text[]) p', [channel, texts]);
    return;
  }
  await withClient(t.url, async (client) => {
    for (const text of texts) await client.query('SELECT pg_notify($1, $2)', [channel, text]);
  });
}

/**
 * A Skiplock whose worker connections count the claim statements they send
 * (a pg client subclass given to the pool: the worker's pool takes the same
 * client class).
 */
function countingSkiplock(): { skiplock: Skiplock; claims: () => number } {
  let claims = 0;
  class CountingClient extends pg.Client {
    override query(...args: unknown[]): never {
      const config = args[0] as string | { text?: string };
      const text = typeof config === 'string' ? config : (config?.text ?? '');
      if (/FOR UPDATE SKIP LOCKED/.test(text) && /lease_seq/.test(text)) claims++;
      return (super.query as (...a: unknown[]) => never)(...args);
    }
  }
  const pool = new pg.Pool({ connectionString: t.url, max: 4, Client: CountingClient } as pg.PoolConfig);
  pool.on('error', () => {});
  const skiplock = new Skiplock({ pool, schema: t.schema });
  t.defer(async () => {
    await skiplock.close();
    await pool.end();
  });
  return { skiplock, claims: () => claims };
}

describe('forged messages on the workers’ channel', () => {
  it('a forged cancel message does not abort a running job; a real cancel still does within a second', async () => {
    const released = gate();
    const aborted: unknown[] = [];
    const worker = t.worker({
      queues: ['forged-cancel'],
      pollIntervalMs: 200,
      onSuccess: 'keep',
      handlers: {
        wait: (_job, { signal }) =>
          new Promise<void>((resolve, reject) => {
            signal.addEventListener('abort', () => {
              aborted.push(signal.reason);
              reject(signal.reason);
            });
            void released.opened.then(resolve);
          }),
      },
    });
    await worker.start();
    const cancelledEvents = record(worker, 'job:cancelled');
    const started = nextEvent(worker, 'job:start');
    const [victim, other] = await t.skiplock.enqueueMany([
      { kind: 'wait', payload: {}, queue: 'forged-cancel' },
      { kind: 'wait', payload: {}, queue: 'forged-cancel' },
    ]);
    await started;
    await waitFor(() => worker.activeCount === 2, 10_000, 'both handlers to run');
    // Forged cancels in every shape the worker reads, many times over.
    const forged = { type: 'cancel', queue: null, delayMs: 0, ids: [victim!.id, other!.id] };
    await forge(Array.from({ length: 20 }, (_, i) => ({ ...forged, n: i })));
    await forge([{ ...forged, queue: 'forged-cancel' }], 'one');
    // Let the worker read them all: a real cancel of a third job, sent after them, is heard after them.
    const marker = nextEvent(worker, 'job:cancelled');
    const third = await t.skiplock.enqueue('wait', {}, { queue: 'forged-cancel' });
    await waitFor(() => worker.activeCount === 3, 10_000, 'the third handler to run');
    const t0 = performance.now();
    expect(await t.skiplock.cancel({ ids: [third.id] })).toEqual({ cancelled: 0, running: 1 });
    const [cancelled] = await marker;
    expect(cancelled.id).toBe(third.id);
    expect(performance.now() - t0).toBeLessThan(1500);
    expect(aborted).toHaveLength(1);
    expect(cancelledEvents.map(([job]) => job.id)).toEqual([third.id]);
    // The forged ones run on and succeed on their first attempt.
    const succeeded = record(worker, 'job:success');
    released.open();
    await waitFor(() => succeeded.length === 2, 10_000, 'the two jobs to succeed');
    for (const job of [victim!, other!]) {
      expect(await t.row(job.id)).toEqual({
        status: 'succeeded',
        attempts: 1,
        locked_by: null,
        last_error: null,
      });
    }
    expect(await t.row(third.id)).toMatchObject({ status: 'cancelled', attempts: 1 });
  });

  it('a forged pause message gives no buffered job back', async () => {
    const slot = blockOnceBuffered(() => worker);
    const worker = t.worker({
      queues: ['forged-pause'],
      pollIntervalMs: 200,
      concurrency: 1,
      prefetch: 5,
      onSuccess: 'keep',
      handlers: {
        step: slot.handler,
      },
    });
    const released = record(worker, 'job:released');
    await t.skiplock.enqueueMany(
      Array.from({ length: 30 }, () => ({ kind: 'step', payload: {}, queue: 'forged-pause' })),
    );
    await worker.start();
    await waitFor(() => slot.blocked && worker.bufferedCount > 0, 10_000, 'a blocked handler and a buffer');
    const buffered = worker.bufferedCount;
    const cancelled = nextEvent(worker, 'job:cancelled');
    await forge(
      Array.from({ length: 20 }, (_, i) => ({ type: 'pause', queue: 'forged-pause', delayMs: 0, n: i })),
    );
    // A real cancel of a buffered job, sent after them, is read after them.
    const [last] = await t.query<{ id: string }>(
      `SELECT id FROM ${t.jobs} WHERE status = 'running' ORDER BY id DESC LIMIT 1`,
    );
    expect(await t.skiplock.cancel({ ids: [last!.id] })).toEqual({ cancelled: 0, running: 1 });
    expect((await cancelled)[0].id).toBe(last!.id);
    expect(released).toEqual([]);
    expect(worker.bufferedCount).toBe(buffered - 1);
    slot.release();
    await waitFor(async () => (await t.jobCount("status = 'succeeded'")) === 29, 10_000, 'the others to run');
    expect(released).toEqual([]);
    expect(await t.jobCount("status = 'cancelled'")).toBe(1);
  });

  it('forged wake-ups cost an idle worker a few coalesced claims, not one each', async () => {
    const { skiplock, claims } = countingSkiplock();
    const worker = t.track(
      skiplock.worker({
        queues: ['forged-wake'],
        handleSignals: false,
        shutdownTimeoutMs: 2000,
        pollIntervalMs: 60_000,
        sweepIntervalMs: 60_000,
        handlers: { noop: () => {} },
      }),
    );
    await worker.start();
    // The first claim of the start is done.
    await waitFor(() => claims() >= 1, 10_000, 'the first claim');
    // A burst (one transaction) of 1,000 wake-ups, then a real job, heard after them:
    // one claim for the burst, and one that finds the job.
    let before = claims();
    await forge(
      Array.from({ length: 1000 }, (_, i) => ({ type: 'insert', queue: 'forged-wake', delayMs: 0, n: i })),
      'one',
    );
    const first = nextEvent(worker, 'job:success');
    await skiplock.enqueue('noop', {}, { queue: 'forged-wake' });
    await first;
    expect(claims() - before).toBeLessThanOrEqual(3);
    before = claims();
    const types = ['insert', 'release', 'requeue', 'sweep', 'resume', 'limits', 'nonsense'];
    const payloads = Array.from({ length: 2000 }, (_, i) => ({
      type: types[i % types.length],
      queue: i % 2 === 0 ? 'forged-wake' : null,
      // Due times spread over the next two seconds: each would arm a timer of its own.
      delayMs: i % 3 === 0 ? 0 : (i % 400) * 5 + 3,
      n: i,
    }));
    // 300 one by one (each arrives alone), the rest in one transaction (a burst).
    await forge(payloads.slice(0, 300));
    await forge(payloads.slice(300), 'one');
    // Then a real job: the worker still runs it.
    const done = nextEvent(worker, 'job:success');
    await skiplock.enqueue('noop', {}, { queue: 'forged-wake' });
    await done;
    // Past the forged due times.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const spent = claims() - before;
    console.log(`2,000 forged wake-ups cost ${spent} claims`);
    // About ten a second at most while they last (without coalescing: about one per message).
    expect(spent).toBeLessThan(100);
  });
});
