import { jetstreamManager } from '@nats-io/jetstream';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  type NatsWorker,
  type NatsWorkerOptions,
  natsConsumerName,
  natsSubject,
  natsTarget,
  natsWorker,
} from '../../src/brokers/nats.js';
import { type Job, type JobMap, PermanentError, Skiplock, SnoozeError } from '../../src/index.js';
import { createRelay } from '../../src/relay/relay.js';
import { expectAbandonedJobBackUncharged } from '../support/abandoned-handler.js';
import { useTestDatabase } from '../support/fixture.js';
import { consumerSettled, NATS_URL, natsConnection, serverMaxPayload, until } from '../support/nats.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

/** A relay of `queues` to a new stream, started; returns the stream. */
function relayed(...queues: string[]): string {
  const stream = b.stream('worker');
  b.relay({ target: natsTarget({ servers: NATS_URL, stream }), queues }).start();
  return stream;
}

/** A promise, `held`, that resolves when `release()` is called. */
function gate(): { held: Promise<void>; release: () => void } {
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { held, release };
}

/** A started natsWorker on `stream` for queue `q`, without signal handling; `options` may override both. */
function startedWorker(
  stream: string,
  options: Omit<NatsWorkerOptions<JobMap>, 'servers' | 'stream'>,
): Promise<NatsWorker> {
  return b.started(
    natsWorker(t.skiplock, { servers: NATS_URL, stream, queues: ['q'], handleSignals: false, ...options }),
  );
}

/** A started worker on queue `q` whose `slow` handlers wait until `release()`; `started` lists their payloads' `n`. */
async function holdingWorker(stream: string, concurrency: number) {
  const { held, release } = gate();
  const started: number[] = [];
  const worker = await startedWorker(stream, {
    concurrency,
    handlers: {
      slow: async (job) => {
        started.push((job.payload as { n: number }).n);
        await held;
      },
    },
  });
  return { worker, started, release };
}

/** A started worker on queue `q` whose `slow` handler returns at once; the array lists the payloads' `n` it ran. */
async function numbersRun(stream: string): Promise<number[]> {
  const ran: number[] = [];
  await startedWorker(stream, {
    handlers: { slow: (job) => void ran.push((job.payload as { n: number }).n) },
  });
  return ran;
}

/** Enqueues `count` jobs of kind `slow` on queue `q`, payloads `{ n }` numbered from 1; returns the numbers. */
async function enqueueSlow(count: number): Promise<number[]> {
  const numbers = Array.from({ length: count }, (_, i) => i + 1);
  await t.skiplock.enqueueMany(numbers.map((n) => ({ kind: 'slow', payload: { n }, queue: 'q' })));
  return numbers;
}

describe('natsWorker', () => {
  it('runs the handler of a relayed job with its payload and attempt', async () => {
    const stream = relayed('q');
    const seen: Job[] = [];
    const worker = await startedWorker(stream, {
      handlers: { greet: (job: Job) => void seen.push(job) },
    });
    const successes: string[] = [];
    worker.on('job:success', (job) => successes.push(job.id));
    const job = await t.skiplock.enqueue('greet', { name: 'Ada' }, { queue: 'q', priority: 3 });
    await until(() => successes.length === 1, 'the job done');
    expect(successes).toEqual([job.id]);
    expect(
      seen.map((j) => [j.id, j.kind, j.queue, j.payload, j.priority, j.attempts, j.maxAttempts]),
    ).toEqual([[job.id, 'greet', 'q', { name: 'Ada' }, 3, 1, 20]]);
    expect(await t.jobCount()).toBe(0);
  });

  it('retries a failing handler after its backoff, attempts counted, and a snooze is not charged', async () => {
    const stream = relayed('q');
    const attempts: number[] = [];
    let snoozed = false;
    const worker = await startedWorker(stream, {
      handlers: {
        flaky: {
          backoff: 100,
          handle: (job) => {
            attempts.push(job.attempts);
            if (!snoozed) {
              snoozed = true;
              throw new SnoozeError(50);
            }
            if (job.attempts < 3) throw new Error(`boom ${job.attempts}`);
          },
        },
      },
    });
    const outcomes: [number, string, number][] = [];
    worker.on('job:failure', (job, _thrown, outcome) =>
      outcomes.push([job.attempts, outcome.status, outcome.retryDelayMs]),
    );
    const successes: number[] = [];
    worker.on('job:success', (job) => successes.push(job.attempts));
    await t.skiplock.enqueue('flaky', {}, { queue: 'q' });
    await until(() => successes.length === 1, 'the job done after retries');
    expect(attempts).toEqual([1, 1, 2, 3]);
    expect(outcomes).toEqual([
      [1, 'queued', 100],
      [2, 'queued', 100],
    ]);
    expect(successes).toEqual([3]);
  });

  it('writes a dead job back with its attempts and errors; requeue sends it through the relay again', async () => {
    const stream = relayed('q');
    let fixed = false;
    const worker = await startedWorker(stream, {
      handlers: {
        doomed: {
          maxAttempts: 2,
          backoff: 50,
          handle: (job) => {
            if (!fixed) throw new Error(`broken on attempt ${job.attempts}`);
          },
        },
      },
    });
    const successes: string[] = [];
    worker.on('job:success', (job) => successes.push(job.id));
    const job = await t.skiplock.enqueue('doomed', { n: 7 }, { queue: 'q', groupKey: 'tenant-7' });
    await until(async () => (await t.row(job.id))?.status === 'dead', 'the job written back dead');
    // Its group key comes back with it, so a requeue keeps the key's order.
    expect(await t.query(`SELECT group_key FROM ${t.jobs} WHERE id = $1`, [job.id])).toEqual([
      { group_key: 'tenant-7' },
    ]);
    const record = (await t.skiplock.getJob(job.id))!;
    expect([
      record.status,
      record.attempts,
      record.maxAttempts,
      record.kind,
      record.queue,
      record.payload,
    ]).toEqual(['dead', 2, 2, 'doomed', 'q', { n: 7 }]);
    expect(record.lastError).toMatch(/^Error: broken on attempt 2/);
    expect(record.errors.map((e) => [e.attempt, e.error.split('\n')[0], e.workerId])).toEqual([
      [1, 'Error: broken on attempt 1', worker.id],
      [2, 'Error: broken on attempt 2', worker.id],
    ]);
    expect(record.finishedAt).toBeInstanceOf(Date);

    fixed = true;
    expect(await t.skiplock.requeue({ ids: [job.id] })).toBe(1);
    await until(() => successes.length === 1, 'the requeued job run');
    expect(successes).toEqual([job.id]);
    await until(async () => (await t.jobCount()) === 0, 'the requeued job relayed and removed');
  });

  it('writes a job whose handler threw a PermanentError back as failed, after one attempt', async () => {
    const stream = relayed('q');
    await startedWorker(stream, {
      handlers: {
        refused: () => {
          throw new PermanentError('no such customer');
        },
      },
    });
    const job = await t.skiplock.enqueue('refused', {}, { queue: 'q' });
    await until(async () => (await t.row(job.id))?.status === 'failed', 'the job written back failed');
    const record = (await t.skiplock.getJob(job.id))!;
    expect([record.attempts, record.errors.length]).toEqual([1, 1]);
    expect(record.lastError).toMatch(/no such customer/);
  });

  it('writes a job back failed, after one run, when its retry message is larger than the server takes', async () => {
    const stream = relayed('q');
    const maxPayload = await serverMaxPayload();
    const runs: number[] = [];
    await startedWorker(stream, {
      handlers: {
        // The error's 4 KB of history push the retry's message past the limit the first one fit under.
        wordy: (job) => {
          runs.push(job.attempts);
          throw new Error('e'.repeat(5000));
        },
      },
    });
    const job = await t.skiplock.enqueue('wordy', { text: 'x'.repeat(maxPayload - 3000) }, { queue: 'q' });
    await until(async () => (await t.row(job.id))?.status === 'failed', 'the job written back failed');
    await until(
      () => consumerSettled(stream, natsConsumerName(natsSubject(stream, 'q'))),
      'nothing left to deliver',
    );
    const record = (await t.skiplock.getJob(job.id))!;
    expect([record.status, record.attempts, runs]).toEqual(['failed', 1, [1]]);
    expect(record.lastError).toMatch(
      new RegExp(
        `^its next message could not be published: its message of \\d+ bytes and its headers are more than the NATS server's max_payload \\(${maxPayload} bytes\\)$`,
      ),
    );
    expect(record.errors.map((e) => [e.attempt, e.error.slice(0, 40)])).toEqual([
      [1, `Error: ${'e'.repeat(33)}`],
      [1, record.lastError!.slice(0, 40)],
    ]);
  });

  it('does not write back a job relayed from another schema: the job of the same id here is left alone', async () => {
    const stream = b.stream('worker');
    // Another schema of the same database relays the same queue to the same stream.
    const pool = new pg.Pool({ connectionString: t.url, max: 4 });
    pool.on('error', () => {});
    const other = new Skiplock({ pool, schema: `${t.schema}_other` });
    t.defer(async () => {
      await other.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${t.schema}_other" CASCADE`);
      await pool.end();
    });
    await other.migrate();
    const relay = createRelay(other, {
      target: natsTarget({ servers: NATS_URL, stream }),
      queues: ['q'],
      handleSignals: false,
      lingerMs: 20,
    });
    relay.on('error', () => {});
    t.defer(() => relay.stop());
    relay.start();
    const worker = await startedWorker(stream, {
      handlers: {
        refused: () => {
          throw new PermanentError('no such customer');
        },
      },
    });
    const errors: string[] = [];
    worker.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    const foreign = await other.enqueue('refused', {}, { queue: 'q' });
    // This schema's own job of the same id, in a queue nobody relays.
    await t.query(
      `INSERT INTO ${t.jobs} (id, kind, queue) OVERRIDING SYSTEM VALUE VALUES ($1, 'local_work', 'elsewhere')`,
      [foreign.id],
    );
    await until(() => errors.length > 0, 'the write-back refused');
    expect(errors).toEqual([
      expect.stringMatching(
        new RegExp(
          `^write-back: job ${foreign.id} ended failed but was relayed from another database or schema`,
        ),
      ),
    ]);
    expect(await t.query(`SELECT kind, queue, status, last_error FROM ${t.jobs}`)).toEqual([
      { kind: 'local_work', queue: 'elsewhere', status: 'queued', last_error: null },
    ]);
  });

  it('writes a job back with its tags, so requeue by tag finds it', async () => {
    const stream = relayed('q');
    const job = await t.skiplock.enqueue('refused', {}, { queue: 'q', tags: ['tenant:7', 'import'] });
    // Relayed and removed before any worker runs it: the write-back inserts the row anew.
    await until(async () => (await t.jobCount()) === 0, 'the job relayed and removed');
    await startedWorker(stream, {
      handlers: {
        refused: () => {
          throw new PermanentError('no such customer');
        },
      },
    });
    await until(async () => (await t.row(job.id))?.status === 'failed', 'the job written back failed');
    expect((await t.skiplock.getJob(job.id))?.tags).toEqual(['tenant:7', 'import']);
    expect((await t.skiplock.listJobs({ tags: ['tenant:7'] })).map((j) => j.id)).toEqual([job.id]);
    expect(await t.skiplock.requeue({ tags: 'import', status: 'failed' })).toBe(1);
  });

  it('runs each job once when jobs wait for a slot longer than the ack wait', async () => {
    const stream = relayed('q');
    const runs: number[] = [];
    await startedWorker(stream, {
      concurrency: 1,
      ackWaitMs: 1000,
      handlers: {
        slow: async (job) => {
          runs.push((job.payload as { n: number }).n);
          await new Promise((resolve) => setTimeout(resolve, 1500));
        },
      },
    });
    await t.skiplock.enqueueMany([1, 2, 3, 4].map((n) => ({ kind: 'slow', payload: { n }, queue: 'q' })));
    // Every delivery acknowledged and none left: no copy can be delivered again after this.
    const consumer = natsConsumerName(natsSubject(stream, 'q'));
    await until(
      async () => runs.length >= 4 && (await consumerSettled(stream, consumer)),
      'four runs, each acknowledged',
      30_000,
    );
    expect([...runs].sort()).toEqual([1, 2, 3, 4]);
  });

  it('gives back the deliveries it holds on stop: another worker runs them at once, not after the ack wait', async () => {
    const stream = relayed('q');
    const busy = await holdingWorker(stream, 4);
    const numbers = await enqueueSlow(40);
    await until(() => busy.started.length === 4, 'four jobs running');
    const stopped = busy.worker.stop();
    busy.release();
    await stopped;
    const second = await numbersRun(stream);
    // The ack wait is 30 s: the jobs the first worker held must come back well before it.
    await until(() => busy.started.length + second.length >= 40, 'the other jobs run', 20_000);
    expect([...busy.started, ...second].sort((a, b) => a - b)).toEqual(numbers);
  });

  it('pulls no more than its free slots: while it is busy, another worker runs the rest', async () => {
    const stream = relayed('q');
    const busy = await holdingWorker(stream, 2);
    const numbers = await enqueueSlow(30);
    await until(() => busy.started.length === 2, 'two jobs running');
    const second = await numbersRun(stream);
    // Every job the busy worker did not start is run by the other one (none waits in its client).
    await until(() => second.length === 28, 'the 28 others run by the second worker', 20_000);
    expect([...busy.started, ...second].sort((a, b) => a - b)).toEqual(numbers);
    busy.release();
  });

  it('shares its slots between its queues: a job that frees the only slot lets the other queue run', async () => {
    const stream = relayed('a', 'b');
    const { held, release } = gate();
    const ran: string[] = [];
    await startedWorker(stream, {
      queues: ['a', 'b'],
      concurrency: 1,
      handlers: {
        slow: async (job) => {
          ran.push(job.queue);
          await held;
        },
        fast: (job) => void ran.push(`${job.queue}${(job.payload as { n: number }).n}`),
      },
    });
    await t.skiplock.enqueue('slow', {}, { queue: 'a' });
    await until(() => ran.length === 1, 'the slow job running');
    // Both queues' loops wait for the slot once b's last pull request has ended at the broker.
    const connection = await natsConnection();
    try {
      const manager = await jetstreamManager(connection);
      const consumerB = natsConsumerName(natsSubject(stream, 'b'));
      await until(
        async () => (await manager.consumers.info(stream, consumerB)).num_waiting === 0,
        "no pull request of queue b's open",
      );
    } finally {
      await connection.close();
    }
    await t.skiplock.enqueueMany([1, 2, 3].map((n) => ({ kind: 'fast', payload: { n }, queue: 'b' })));
    release();
    await until(() => ran.length === 4, "queue b's jobs run once the slot is free", 10_000);
    expect(ran).toEqual(['a', 'b1', 'b2', 'b3']);
  });

  it('gives back, within seconds, a message of one queue that came while another queue took the slots', async () => {
    const stream = relayed('a', 'b');
    const { held, release } = gate();
    const started: string[][] = [[], []];
    const holding = (w: number) => ({
      queues: ['a', 'b'],
      concurrency: 2,
      handlers: {
        slow: async (job: Job) => {
          started[w]!.push(`${job.queue}${(job.payload as { n: number }).n}`);
          await held;
        },
      },
    });
    // Idle, it has a pull request of each queue open for both slots: a burst of both fills all four.
    await startedWorker(stream, holding(0));
    await t.skiplock.enqueueMany(
      ['a', 'b'].flatMap((queue) => [1, 2].map((n) => ({ kind: 'slow', payload: { n }, queue }))),
    );
    await until(() => started[0]!.length === 2, 'two jobs running on the first worker');
    await startedWorker(stream, holding(1));
    await until(() => started[1]!.length === 2, 'the two others run by the second worker', 15_000);
    expect([...started[0]!, ...started[1]!].sort()).toEqual(['a1', 'a2', 'b1', 'b2']);
    release();
  });

  it('sets up its consumer again when someone deleted it, reporting it once', async () => {
    const stream = relayed('q');
    const ran: number[] = [];
    const worker = await startedWorker(stream, {
      handlers: { greet: (job) => void ran.push((job.payload as { n: number }).n) },
    });
    const errors: string[] = [];
    worker.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    await t.skiplock.enqueue('greet', { n: 1 }, { queue: 'q' });
    await until(() => ran.length === 1, 'the first job run');
    const connection = await natsConnection();
    try {
      const manager = await jetstreamManager(connection);
      await manager.consumers.delete(stream, natsConsumerName(natsSubject(stream, 'q')));
    } finally {
      await connection.close();
    }
    await until(() => errors.length > 0, 'the deletion reported');
    await t.skiplock.enqueue('greet', { n: 2 }, { queue: 'q' });
    await until(() => ran.length === 2, 'a job relayed after the deletion run', 10_000);
    expect(ran).toEqual([1, 2]);
    expect(errors).toEqual(['consume: consumer deleted']);
  });

  it('gives a job of a kind it has no handler for back, uncharged, for a worker that has one', async () => {
    const stream = relayed('q');
    const older = await startedWorker(stream, { handlers: { a: () => {} } });
    const errors: string[] = [];
    older.on('error', (error, source) => errors.push(`${source}: ${error.message}`));
    const job = await t.skiplock.enqueue('b', { n: 1 }, { queue: 'q', maxAttempts: 1 });
    await until(() => errors.length > 0, 'the unknown kind reported');
    expect(errors).toEqual([
      'consume: no handler for kind "b" here: its jobs are given back (every 5000 ms) for a worker that has one',
    ]);
    const ran: number[] = [];
    await startedWorker(stream, { handlers: { b: (j) => void ran.push(j.attempts) } });
    // Both pull from one consumer, and the broker may hand each redelivery to either: with the
    // older one stopped, the next one (within 5 s) goes to the newer.
    await older.stop();
    await until(() => ran.length > 0, 'the job run by the newer worker', 20_000);
    // Its first attempt: being given back charged none. It was never written back as dead.
    expect(ran).toEqual([1]);
    expect(await t.row(job.id)).toBeUndefined();
  });

  it('refuses a transactional handler, naming it', () => {
    expect(() =>
      natsWorker(t.skiplock, {
        servers: NATS_URL,
        stream: 'never_made',
        handlers: { charge: { transactional: true, handle: () => {} } },
      }),
    ).toThrow(/natsWorker\.handlers\.charge/);
  });
});

describe('natsWorker stop', () => {
  it('is bounded when the broker stops answering', async () => {
    const stream = relayed('q');
    await b.expectWorkerBoundedStopOnDeafBroker(NATS_URL, (servers, options) =>
      natsWorker(t.skiplock, { ...options, servers, stream }),
    );
  });

  it('is bounded: a handler that ignores its signal is abandoned and its job comes back uncharged', async () => {
    const stream = relayed('q');
    await expectAbandonedJobBackUncharged(t.skiplock, (options) => startedWorker(stream, options));
  });
});
