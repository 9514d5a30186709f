import { jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import type { Relay } from '../../src/index.js';
import { fakeClock } from '../support/fake-clock.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, natsConnection, serverMaxPayload, streamMessages, until } from '../support/nats.js';
import { exited, forkScript, sent } from '../support/processes.js';
import { rolledBack } from '../support/transaction.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

function relayTo(
  stream: string,
  queues: string[],
  extra: { batchSize?: number; sweepIntervalMs?: number } = {},
): Relay {
  return b.relay({ target: natsTarget({ servers: NATS_URL, stream }), queues, ...extra });
}

const newStream = () => b.stream('relay');

describe('the relay to NATS JetStream', () => {
  it('publishes exactly the committed jobs of its queues, then removes them', async () => {
    const stream = newStream();
    const committed = await t.skiplock.enqueueMany([
      { kind: 'a', payload: { n: 1 }, queue: 'relayed' },
      { kind: 'b', payload: { n: 2 }, queue: 'relayed' },
    ]);
    const other = await t.skiplock.enqueue('c', {}, { queue: 'kept' });
    await rolledBack(t.db.pool, (client) =>
      t.skiplock.enqueue('rolled_back', {}, { queue: 'relayed', client }),
    );
    relayTo(stream, ['relayed']).start();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'relayed jobs removed');
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id).sort()).toEqual(committed.map((job) => job.id).sort());
    expect(messages.map((m) => [m.job.kind, m.job.payload, m.job.queue])).toEqual([
      ['a', { n: 1 }, 'relayed'],
      ['b', { n: 2 }, 'relayed'],
    ]);
    expect(messages.every((m) => m.msgId === m.job.messageId)).toBe(true);
    expect(await t.jobCount('id = $1', [other.id])).toBe(1);
  });

  it('relays a job that reuses the id of one relayed before (its sequence restarted): not dropped as a duplicate', async () => {
    const stream = newStream();
    relayTo(stream, ['relayed']).start();
    const first = await t.skiplock.enqueue('a', { n: 1 }, { queue: 'relayed' });
    await until(async () => (await t.jobCount()) === 0, 'the first job relayed');
    await t.db.query(`SELECT setval(pg_get_serial_sequence($1, 'id'), $2::bigint, false)`, [
      t.jobs,
      first.id,
    ]);
    const second = await t.skiplock.enqueue('a', { n: 2 }, { queue: 'relayed' });
    expect(second.id).toBe(first.id);
    await until(async () => (await t.jobCount()) === 0, 'the second job relayed');
    const messages = await streamMessages(stream);
    expect(messages.map((m) => [m.job.id, m.job.payload])).toEqual([
      [first.id, { n: 1 }],
      [second.id, { n: 2 }],
    ]);
    expect(new Set(messages.map((m) => m.msgId)).size).toBe(2);
  });

  it('does not relay a paused queue until it is resumed, nor a job before its run_at comes', async () => {
    const stream = newStream();
    await t.skiplock.pauseQueue('relayed');
    const job = await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    const later = await t.skiplock.enqueue(
      'a',
      {},
      { queue: 'relayed', runAt: new Date(Date.now() + 3_600_000) },
    );
    const relay = relayTo(stream, ['relayed', 'open']);
    relay.start();
    // A job of a queue that is not paused, enqueued after: once it is relayed, the relay has looked.
    const open = await t.skiplock.enqueue('a', {}, { queue: 'open' });
    await until(async () => (await t.jobCount('id = $1', [open.id])) === 0, 'the open queue relayed');
    expect(relay.metrics.published).toBe(1);
    expect((await t.row(job.id))?.status).toBe('queued');
    await t.skiplock.resumeQueue('relayed');
    await until(async () => (await t.jobCount('id = $1', [job.id])) === 0, 'relayed after resume');
    expect(relay.metrics.published).toBe(2);
    expect((await t.row(later.id))?.status).toBe('queued');
    // Once due, the scheduled job is relayed too.
    await t.query(`UPDATE ${t.jobs} SET run_at = now() WHERE id = $1`, [later.id]);
    await until(async () => (await t.jobCount('id = $1', [later.id])) === 0, 'relayed once due');
    expect(relay.metrics.published).toBe(3);
  });

  it('never relays a job past its start deadline, which the sweeper then expires', async () => {
    const stream = newStream();
    // No sweep but the first, so only the claim keeps the late job back.
    const relay = relayTo(stream, ['relayed'], { sweepIntervalMs: 3_600_000 });
    relay.start();
    const first = await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    await until(async () => (await t.jobCount('id = $1', [first.id])) === 0, 'the first job relayed');
    const late = await t.skiplock.enqueue(
      'a',
      {},
      { queue: 'relayed', startBy: new Date(Date.now() - 60_000) },
    );
    // A job enqueued after: once it is relayed, the relay has looked at the queue.
    const due = await t.skiplock.enqueue('a', {}, { queue: 'relayed', startWithinMs: 3_600_000 });
    await until(async () => (await t.jobCount('id = $1', [due.id])) === 0, 'the due job relayed');
    expect(relay.metrics.published).toBe(2);
    expect((await t.row(late.id))?.status).toBe('queued');
    await t.skiplock.sweep();
    expect((await t.skiplock.getJob(late.id))?.status).toBe('cancelled');
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id)).toEqual([first.id, due.id]);
  });

  it('sweeps by itself: the batch of a dead relay is relayed again and a job past its deadline expires, with no worker running', async () => {
    const stream = newStream();
    const [orphan, late] = await t.skiplock.enqueueMany([
      { kind: 'a', payload: { n: 1 }, queue: 'relayed' },
      { kind: 'a', payload: { n: 2 }, queue: 'relayed', startBy: new Date(Date.now() - 60_000) },
    ]);
    // As a relay killed mid-batch leaves it: running under its lease, long expired.
    await t.query(
      `UPDATE ${t.jobs} SET status = 'running', locked_by = 'relay:gone', locked_at = now() - interval '1 hour',
              visibility_timeout_ms = 1000 WHERE id = $1`,
      [orphan!.id],
    );
    const relay = relayTo(stream, ['relayed'], { sweepIntervalMs: 100 });
    relay.start();
    await until(async () => (await t.jobCount('id = $1', [orphan!.id])) === 0, 'the orphaned job relayed');
    await until(async () => (await t.row(late!.id))?.status === 'cancelled', 'the late job expired');
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id)).toEqual([orphan!.id]);
  });

  it('stops within its bounds when the broker stops answering mid-batch; the batch is given back', async () => {
    const stream = newStream();
    await b.expectBoundedStopOnDeafBroker(NATS_URL, (url) => natsTarget({ servers: url, stream }));
  });

  it('stops within a few seconds while a broker that never answers holds its connect', async () => {
    const stream = newStream();
    await b.expectBoundedStopWhileConnecting(NATS_URL, (url) => natsTarget({ servers: url, stream }));
  });

  it('shares the work between two relays: no job is published by both', async () => {
    const stream = newStream();
    const jobs = await t.skiplock.enqueueMany(
      Array.from({ length: 400 }, (_, n) => ({ kind: 'a', payload: { n }, queue: 'relayed' })),
    );
    const published: string[][] = [[], []];
    const pair = [
      relayTo(stream, ['relayed'], { batchSize: 10 }),
      relayTo(stream, ['relayed'], { batchSize: 10 }),
    ];
    pair.forEach((relay, i) => {
      relay.on('relay:publish', (batch) => published[i]!.push(...batch.map((job) => job.id)));
      relay.start();
    });
    await until(async () => (await t.jobCount()) === 0, 'every job relayed', 60_000);
    const all = [...published[0]!, ...published[1]!];
    expect(all.sort()).toEqual(jobs.map((job) => job.id).sort());
    expect(new Set(all).size).toBe(400);
    const messages = await streamMessages(stream);
    expect(messages.length).toBe(400);
  });

  it('a relay killed between publish and delete publishes again, and the duplicate window drops the repeat', async () => {
    const stream = newStream();
    const jobs = await t.skiplock.enqueueMany([
      { kind: 'a', payload: { n: 1 }, queue: 'relayed' },
      { kind: 'a', payload: { n: 2 }, queue: 'relayed' },
    ]);
    const child = forkScript('../processes/relay-crash.ts', {
      DATABASE_URL: t.url,
      SKIPLOCK_SCHEMA: t.schema,
      NATS_URL,
      NATS_STREAM: stream,
      RELAY_QUEUE: 'relayed',
    });
    await sent(child, 'published');
    child.kill('SIGKILL');
    expect(await exited(child)).toBe('SIGKILL');
    expect(await t.jobCount("status = 'running'")).toBe(2);
    // The crashed relay's lease (1 s) runs out; the sweeper gives the jobs back.
    await until(async () => {
      await t.skiplock.sweep(1000);
      return (await t.jobCount("status = 'queued'")) === 2;
    }, 'jobs reclaimed');
    const relay = relayTo(stream, ['relayed']);
    relay.start();
    await until(async () => (await t.jobCount()) === 0, 'jobs relayed again');
    expect(relay.metrics.published).toBe(2);
    const messages = await streamMessages(stream);
    expect(messages.map((m) => m.job.id).sort()).toEqual(jobs.map((job) => job.id).sort());
    expect(messages.map((m) => m.msgId)).toEqual(messages.map((m) => m.job.messageId));
  });

  it('after a batch that was not full, looks again only when lingerMs has passed on its clock', async () => {
    const stream = newStream();
    const clock = fakeClock();
    const relay = b.relay({
      target: natsTarget({ servers: NATS_URL, stream }),
      queues: ['relayed'],
      lingerMs: 60_000,
      clock,
    });
    const published: string[] = [];
    relay.on('relay:publish', (jobs) => published.push(...jobs.map((job) => job.id)));
    const first = await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    relay.start();
    await until(() => published.length === 1 && clock.pending() === 1, 'the first batch, then the linger');
    const second = await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    await clock.tick(59_999);
    expect([published, (await t.row(second.id))?.status]).toEqual([[first.id], 'queued']);
    await clock.tick(1);
    await until(() => published.length === 2, 'the second batch');
    expect(published).toEqual([first.id, second.id]);
  });

  it('ends failed, saying why, a job whose message is larger than the server takes; the rest of its batch is relayed', async () => {
    const stream = newStream();
    const maxPayload = await serverMaxPayload();
    // The payload fits skiplock's limit; with the message around it, it passes the server's.
    const big = await t.skiplock.enqueue('big', { text: 'x'.repeat(maxPayload - 200) }, { queue: 'relayed' });
    const small = await t.skiplock.enqueue('small', { n: 1 }, { queue: 'relayed' });
    const relay = relayTo(stream, ['relayed']);
    const errors: [string, string][] = [];
    relay.on('error', (error, source) => errors.push([source, error.message]));
    relay.start();
    await until(async () => (await t.row(big.id))?.status === 'failed', 'the large job failed');
    await until(async () => (await t.jobCount('id = $1', [small.id])) === 0, 'the small job relayed');
    const record = (await t.skiplock.getJob(big.id))!;
    expect([record.status, record.attempts, record.errors]).toEqual(['failed', 0, []]);
    expect(record.lastError).toMatch(
      new RegExp(
        `^nats refuses it: its message of \\d+ bytes and its headers are more than the NATS server's max_payload \\(${maxPayload} bytes\\)$`,
      ),
    );
    expect(record.finishedAt).toBeInstanceOf(Date);
    expect(relay.metrics).toMatchObject({ published: 1, refused: 1, released: 0 });
    expect(errors).toEqual([['publish', `job ${big.id}: ${record.lastError}; it ended failed`]]);
    expect((await streamMessages(stream)).map((m) => m.job.id)).toEqual([small.id]);
  });

  it("ends failed a job whose message is larger than an existing stream's max_msg_size", async () => {
    const stream = newStream();
    const connection = await natsConnection();
    try {
      const manager = await jetstreamManager(connection);
      await manager.streams.add({
        name: stream,
        subjects: [`${stream}.>`],
        retention: RetentionPolicy.Workqueue,
        storage: StorageType.File,
        max_msg_size: 10_000,
      });
    } finally {
      await connection.close();
    }
    const big = await t.skiplock.enqueue('big', { text: 'x'.repeat(20_000) }, { queue: 'relayed' });
    const small = await t.skiplock.enqueue('small', {}, { queue: 'relayed' });
    const relay = relayTo(stream, ['relayed']);
    relay.start();
    await until(async () => (await t.row(big.id))?.status === 'failed', 'the large job failed');
    await until(async () => (await t.jobCount('id = $1', [small.id])) === 0, 'the small job relayed');
    expect((await t.skiplock.getJob(big.id))?.lastError).toMatch(
      /^nats refuses it: its message of \d+ bytes is more than the stream's max_msg_size \(message size exceeds maximum allowed\)$/,
    );
    expect(relay.metrics).toMatchObject({ published: 1, refused: 1, released: 0 });
  });

  it('reports a listener that throws as an error from source listener, and goes on relaying', async () => {
    const stream = newStream();
    const relay = relayTo(stream, ['relayed']);
    const errors: [string, string][] = [];
    relay.on('error', (error, source) => errors.push([source, error.code]));
    relay.on('relay:publish', () => {
      throw new Error('listener bug');
    });
    relay.start();
    await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    await until(async () => (await t.jobCount()) === 0, 'the first job relayed');
    await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
    await until(
      async () => relay.metrics.published === 2 && (await t.jobCount()) === 0,
      'the second job relayed',
    );
    expect(errors).toEqual([
      ['listener', 'LISTENER'],
      ['listener', 'LISTENER'],
    ]);
  });
});
