import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { parseWakeUp, type WakeUp } from '../src/db/wake-up.js';
import { CancelledError, ValidationError } from '../src/index.js';
import { TEST_SCHEMA, waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { gate, untilAborted } from './support/gate.js';

const { db, skiplock } = useFileDatabase();

const fast = { handleSignals: false, pollIntervalMs: 200 } as const;

async function row(id: string) {
  const [r] = await db.query<{
    status: string;
    attempts: number;
    finished: boolean;
    locked_by: string | null;
  }>(
    `SELECT status, attempts, finished_at IS NOT NULL AS finished, locked_by FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  return r;
}

describe('cancel', () => {
  it('ends a queued job cancelled at once, and says nothing of finished jobs', async () => {
    const queued = await skiplock.enqueue('k', {}, { queue: 'c-queued' });
    expect(await skiplock.cancel({ ids: [queued.id] })).toEqual({ cancelled: 1, running: 0 });
    expect(await row(queued.id)).toEqual({
      status: 'cancelled',
      attempts: 0,
      finished: true,
      locked_by: null,
    });
    // Cancelling it again, or a dead job, changes nothing and counts nothing.
    const [dead] = await db.query<{ id: string; finished_at: Date }>(
      `INSERT INTO ${db.jobs} (kind, queue, status, attempts, finished_at)
       VALUES ('k', 'c-queued', 'dead', 3, now() - interval '1 hour') RETURNING id, finished_at`,
    );
    expect(await skiplock.cancel({ ids: [queued.id, dead!.id] })).toEqual({ cancelled: 0, running: 0 });
    expect(await skiplock.cancel({ queue: 'c-queued' })).toEqual({ cancelled: 0, running: 0 });
    const [after] = await db.query(`SELECT status, attempts, finished_at FROM ${db.jobs} WHERE id = $1`, [
      dead!.id,
    ]);
    expect(after).toEqual({ status: 'dead', attempts: 3, finished_at: dead!.finished_at });
    // Requeue takes it back when named.
    expect(await skiplock.requeue({ ids: [queued.id] })).toBe(1);
    expect(await row(queued.id)).toEqual({ status: 'queued', attempts: 0, finished: false, locked_by: null });
    expect(await skiplock.cancel({ kind: 'k', queue: 'c-queued', status: 'queued' })).toEqual({
      cancelled: 1,
      running: 0,
    });
    expect(await skiplock.requeue({ all: true })).toBe(1); // the dead one only
    expect(await skiplock.requeue({ status: 'cancelled', queue: 'c-queued' })).toBe(1);
  });

  it('refuses an empty or bad filter', async () => {
    await expect(skiplock.cancel({})).rejects.toBeInstanceOf(ValidationError);
    await expect(skiplock.cancel({ status: 'dead' as never })).rejects.toThrow(/filter.status/);
    await expect(skiplock.cancel({ ids: ['x'] })).rejects.toThrow(/filter.ids/);
  });

  it('aborts a running handler that waits on its signal within 2 s; the job ends cancelled, attempts unchanged', async () => {
    const aborted = untilAborted();
    const worker = skiplock.worker({
      ...fast,
      queues: ['c-running'],
      handlers: {
        wait: aborted.handler,
      },
    });
    await worker.start();
    const started = nextEvent(worker, 'job:start');
    const job = await skiplock.enqueue('wait', {}, { queue: 'c-running' });
    await started;
    const cancelled = nextEvent(worker, 'job:cancelled');
    const t0 = performance.now();
    expect(await skiplock.cancel({ ids: [job.id] })).toEqual({ cancelled: 0, running: 1 });
    const [ended] = await cancelled;
    const elapsed = performance.now() - t0;
    expect(ended.id).toBe(job.id);
    expect(elapsed).toBeLessThan(2000);
    expect(aborted.reason).toBeInstanceOf(CancelledError);
    expect((await skiplock.getJob(job.id))?.cancelRequestedAt).toBeInstanceOf(Date);
    expect((aborted.reason as CancelledError).code).toBe('CANCELLED');
    expect(await row(job.id)).toEqual({ status: 'cancelled', attempts: 1, finished: true, locked_by: null });
    await worker.stop();
  });

  it('a handler that ignores its signal and later succeeds still ends cancelled', async () => {
    const returned = gate();
    let settled = false;
    const worker = skiplock.worker({
      ...fast,
      queues: ['c-ignore'],
      handlers: {
        stubborn: async () => {
          await returned.opened;
          settled = true;
        },
      },
    });
    await worker.start();
    const started = nextEvent(worker, 'job:start');
    const job = await skiplock.enqueue('stubborn', {}, { queue: 'c-ignore' });
    await started;
    const cancelled = nextEvent(worker, 'job:cancelled');
    expect(await skiplock.cancel({ ids: [job.id] })).toEqual({ cancelled: 0, running: 1 });
    await cancelled;
    returned.open();
    await waitFor(() => settled, 5000, 'the handler to return');
    expect(await row(job.id)).toEqual({ status: 'cancelled', attempts: 1, finished: true, locked_by: null });
    await worker.stop();
    expect(await row(job.id)).toEqual({ status: 'cancelled', attempts: 1, finished: true, locked_by: null });
  });

  it('the heartbeat cancels a running job whose message was missed', async () => {
    const worker = skiplock.worker({
      ...fast,
      queues: ['c-heartbeat'],
      heartbeatIntervalMs: 100,
      handlers: {
        wait: untilAborted().handler,
      },
    });
    await worker.start();
    const started = nextEvent(worker, 'job:start');
    const job = await skiplock.enqueue('wait', {}, { queue: 'c-heartbeat' });
    await started;
    const cancelled = nextEvent(worker, 'job:cancelled', 5000);
    // The flag without the message, as if the notification were lost.
    await db.query(`UPDATE ${db.jobs} SET cancel_requested_at = now() WHERE id = $1`, [job.id]);
    await cancelled;
    expect(await row(job.id)).toEqual({ status: 'cancelled', attempts: 1, finished: true, locked_by: null });
    await worker.stop();
  });

  it('a buffered job whose cancel is requested never starts and ends cancelled', async () => {
    const released = gate();
    const ran: string[] = [];
    let blocked: string | undefined;
    const worker = skiplock.worker({
      ...fast,
      queues: ['c-buffer'],
      concurrency: 1,
      prefetch: 10,
      onSuccess: 'keep',
      handlers: {
        step: async (job) => {
          ran.push(job.id);
          // Quick until the buffer holds jobs, then one blocks so that they wait there.
          if (blocked === undefined && worker.bufferedCount > 0) {
            blocked = job.id;
            await released.opened;
          }
        },
      },
    });
    await skiplock.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ kind: 'step', payload: { i }, queue: 'c-buffer' })),
    );
    await worker.start();
    await waitFor(
      () => blocked !== undefined && worker.bufferedCount > 0,
      5000,
      'a blocked handler and a buffer',
    );
    const [waiting] = await db.query<{ id: string }>(
      `SELECT id FROM ${db.jobs} WHERE queue = 'c-buffer' AND status = 'running' AND id <> $1 ORDER BY id DESC LIMIT 1`,
      [blocked],
    );
    const cancelled = nextEvent(worker, 'job:cancelled');
    expect(await skiplock.cancel({ ids: [waiting!.id] })).toEqual({ cancelled: 0, running: 1 });
    const [ended] = await cancelled;
    expect(ended.id).toBe(waiting!.id);
    expect(await row(waiting!.id)).toEqual({
      status: 'cancelled',
      attempts: 0,
      finished: true,
      locked_by: null,
    });
    released.open();
    await waitFor(
      async () =>
        (
          await db.query(
            `SELECT 1 FROM ${db.jobs} WHERE queue = 'c-buffer' AND status NOT IN ('succeeded', 'cancelled')`,
          )
        ).length === 0,
      10_000,
      'every job of c-buffer to end',
    );
    expect(ran).not.toContain(waiting!.id);
    expect(ran).toHaveLength(39);
    await worker.stop();
  });

  it('cancel racing with success leaves exactly one final status, the one the cancel reported', async () => {
    const worker = skiplock.worker({
      ...fast,
      queues: ['c-race'],
      concurrency: 20,
      onSuccess: 'keep',
      handlers: { quick: () => new Promise((resolve) => setTimeout(resolve, Math.random() * 6)) },
    });
    await worker.start();
    const ROUNDS = 8;
    const PER_ROUND = 40;
    const N = ROUNDS * PER_ROUND;
    // Cancel each job at a random moment of its life: queued, running, or done.
    const expected = new Map<string, string>();
    const seen = { queued: 0, running: 0, finished: 0 };
    const ids: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const jobs = await skiplock.enqueueMany(
        Array.from({ length: PER_ROUND }, (_, i) => ({ kind: 'quick', payload: { i }, queue: 'c-race' })),
      );
      await Promise.all(
        jobs.map(async (job) => {
          ids.push(job.id);
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 25));
          const counts = await skiplock.cancel({ ids: [job.id] });
          expect(counts.cancelled + counts.running).toBeLessThanOrEqual(1);
          if (counts.cancelled === 1) seen.queued++;
          else if (counts.running === 1) seen.running++;
          else seen.finished++;
          expected.set(job.id, counts.cancelled + counts.running === 1 ? 'cancelled' : 'succeeded');
        }),
      );
    }
    const rows = await waitFor(
      async () => {
        const r = await db.query<{ id: string; status: string }>(
          `SELECT id, status FROM ${db.jobs} WHERE id = ANY($1::bigint[])`,
          [ids],
        );
        return r.every((x) => x.status === 'succeeded' || x.status === 'cancelled') ? r : undefined;
      },
      10_000,
      'every job to end',
    );
    expect(rows).toHaveLength(N);
    const wrong = rows.filter((r) => expected.get(r.id) !== r.status);
    expect(wrong, `cancel saw ${JSON.stringify(seen)}`).toEqual([]);
    // The race was real: some cancels met a queued job, some a running one, some a finished one.
    console.log('cancel race: cancel found', seen);
    await worker.stop();
  });

  it('tells workers the ids of running jobs, 300 per message', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const messages: WakeUp[] = [];
    listener.on('notification', (n) => messages.push(parseWakeUp(n.payload)));
    await listener.query(`LISTEN "skiplock:${TEST_SCHEMA.replaceAll('"', '""')}"`);
    const rows = await db.query<{ id: string }>(
      `INSERT INTO ${db.jobs} (kind, queue, status, attempts, locked_at, locked_by)
       SELECT 'k', 'c-many', 'running', 1, now(), 'elsewhere' FROM generate_series(1, 700) RETURNING id`,
    );
    expect(await skiplock.cancel({ queue: 'c-many' })).toEqual({ cancelled: 0, running: 700 });
    await waitFor(() => messages.length >= 3, 5000, 'three cancel messages');
    expect(messages.map((m) => [m.type, m.queue, m.ids?.length])).toEqual([
      ['cancel', null, 300],
      ['cancel', null, 300],
      ['cancel', null, 100],
    ]);
    expect(new Set(messages.flatMap((m) => m.ids ?? []))).toEqual(new Set(rows.map((r) => r.id)));
    await listener.end();
    // A reader from before control messages: unknown types are plain wake-ups.
    expect(parseWakeUp('{"type":"later","queue":"q","delayMs":5,"ids":[1,"2"]}')).toEqual({
      type: 'unknown',
      queue: 'q',
      delayMs: 5,
      ids: ['2'],
    });
  });
});
