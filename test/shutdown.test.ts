/** Stopping a worker: running handlers finish within the deadline, the rest are given back uncharged. */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type Job, ShutdownError, Skiplock } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent, record } from './support/events.js';
import { useTestDatabase } from './support/fixture.js';
import { gate, untilAborted } from './support/gate.js';
import { holdClaims } from './support/held-claims.js';
import { startNetProxy } from './support/net-proxy.js';

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

  it('a claim that returns during stop() is given back before stop() resolves, its attempts uncharged', async () => {
    await t.skiplock.enqueueMany(
      Array.from({ length: 300 }, (_, i) => ({ kind: 'late', payload: { i }, queue: 'late' })),
    );
    // The claim waits, row by row, for an advisory lock this test holds.
    const held = await holdClaims(t, 4242);
    // Nothing may run: every claimed job is given back by the stop.
    const ran: number[] = [];
    const late = (job: Job) => {
      ran.push(job.attempts);
    };
    const worker = t.worker({ ...base, queues: ['late'], concurrency: 10, handlers: { late } });
    await worker.start();
    await held.blocked();
    const stopping = worker.stop();
    await held.release();
    await stopping;
    expect(ran).toEqual([]);
    const rows = await t.query<{ status: string; attempts: number; n: number }>(
      `SELECT status, attempts, count(*)::int AS n FROM ${t.jobs} GROUP BY 1, 2`,
    );
    expect(rows).toEqual([{ status: 'queued', attempts: 0, n: 300 }]);
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

  it('stop() during a half-open network partition resolves within shutdownTimeoutMs plus about 3 s; the held jobs run again after it', async () => {
    const server = new URL(t.url);
    const proxy = await startNetProxy({ host: server.hostname, port: Number(server.port || 5432) });
    t.defer(() => proxy.close());
    const viaProxy = new URL(t.url);
    viaProxy.host = `127.0.0.1:${proxy.port}`;
    const remote = new Skiplock({ connectionString: viaProxy.toString(), schema: t.schema });
    t.defer(() => remote.close());
    const shutdownTimeoutMs = 1000;
    const finish = gate();
    const worker = t.track(
      remote.worker({
        ...base,
        handleSignals: false,
        queues: ['partition'],
        concurrency: 3,
        shutdownTimeoutMs,
        visibilityTimeoutMs: 3000,
        // statementTimeoutMs stays at its default (30 s): stop() must not wait for it.
        handlers: {
          hold: untilAborted().handler,
          finish: () => finish.opened,
        },
      }),
    );
    worker.on('error', () => {});
    await worker.start();
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'hold', payload: {}, queue: 'partition' },
      { kind: 'hold', payload: {}, queue: 'partition' },
      { kind: 'finish', payload: {}, queue: 'partition' },
    ]);
    await waitFor(() => worker.activeCount === 3, 10_000, 'the three handlers to run');

    // Sockets stay open, nothing goes through; a handler finishes meanwhile (its result cannot be written).
    proxy.partition();
    finish.open();
    const t0 = performance.now();
    await worker.stop();
    const stopMs = performance.now() - t0;
    console.log(
      `stop() during a partition took ${Math.round(stopMs)} ms (shutdownTimeoutMs ${shutdownTimeoutMs})`,
    );
    expect(stopMs).toBeLessThan(shutdownTimeoutMs + 3000 + 1000);
    // Nothing reached the database: the jobs are still held by the stopped worker.
    for (const job of jobs)
      expect(await t.row(job.id)).toMatchObject({ status: 'running', attempts: 1, locked_by: worker.id });

    // The partition ends with the connections reset; the sweeper reclaims the jobs and another worker runs them.
    await proxy.close();
    const ran: string[] = [];
    const other = t.worker({
      ...base,
      queues: ['partition'],
      sweepIntervalMs: 200,
      onSuccess: 'keep',
      handlers: { hold: (job) => void ran.push(job.id), finish: (job) => void ran.push(job.id) },
    });
    await other.start();
    await waitFor(
      () => ran.length === 3,
      20_000,
      'the three jobs to run again',
      () => ran,
    );
    expect([...ran].sort()).toEqual(jobs.map((j) => j.id).sort());
    await waitFor(
      async () => (await t.jobCount("queue = 'partition' AND status = 'succeeded'")) === 3,
      10_000,
      'the three successes to be written',
    );
    for (const job of jobs) {
      expect(await t.row(job.id)).toEqual({
        status: 'succeeded',
        attempts: 2,
        locked_by: null,
        last_error: 'reclaimed: visibility timeout',
      });
    }
  });
});
