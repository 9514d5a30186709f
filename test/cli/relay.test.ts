import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/fixture.js';
import { deleteStream, NATS_URL, streamMessages, uniqueStream, until } from '../support/nats.js';
import { deleteQueues, drainQueue, RABBITMQ_URL, uniquePrefix } from '../support/rabbitmq.js';
import { connectionFlags, runCli, spawnCli } from './cli-process.js';

const t = useTestDatabase();
const stream = uniqueStream('cli_relay');

/** Starts `skiplock relay --to <to> ...flags` on the test's schema. */
const startRelay = (to: string, ...flags: string[]) =>
  spawnCli(['relay', '--to', to, ...flags, ...connectionFlags(t.url, t.schema)]);

afterAll(() => deleteStream(stream));

describe('skiplock relay', () => {
  it('relays the jobs of its queues to NATS JetStream and stops on SIGTERM with exit 0', async () => {
    const job = await t.skiplock.enqueue('send_email', { to: 'a@example.com' }, { queue: 'emails' });
    const relay = startRelay(NATS_URL, '--stream', stream, '--queue', 'emails', '--metrics-port', '0');
    await relay.waitForOutput(/relay started on queues emails/);
    await until(async () => (await t.jobCount()) === 0, 'the job relayed');
    await relay.waitForOutput(/metrics at http/);
    const url = /metrics at (http:\/\/\S+)"/.exec(relay.stdout())![1]!;
    const scraped = await (await fetch(url)).text();
    expect(scraped).toMatch(/^skiplock_relay_published_total\{queue="emails"\} 1$/m);
    relay.child.kill('SIGTERM');
    expect(await relay.exited).toBe(0);
    expect(relay.stdout()).toMatch(/"published":1/);
    const messages = await streamMessages(stream);
    expect(messages.map((m) => [m.job.id, m.job.kind, m.job.payload])).toEqual([
      [job.id, 'send_email', { to: 'a@example.com' }],
    ]);
  });

  it('relays to RabbitMQ with --to amqp://', async () => {
    const prefix = uniquePrefix('cli_relay');
    const job = await t.skiplock.enqueue('send_email', { to: 'b@example.com' }, { queue: 'emails' });
    const relay = startRelay(
      RABBITMQ_URL,
      '--rabbitmq-queue',
      prefix,
      '--queue',
      'emails',
      '--max-batches-in-flight',
      '1',
    );
    try {
      await until(async () => (await t.jobCount()) === 0, 'the job relayed');
      relay.child.kill('SIGTERM');
      expect(await relay.exited).toBe(0);
      expect(relay.stdout()).not.toMatch(/guest:guest/);
      const messages = await drainQueue(`${prefix}.emails`);
      expect(messages.map((m) => [m.job.id, m.job.payload])).toEqual([[job.id, { to: 'b@example.com' }]]);
    } finally {
      await deleteQueues([`${prefix}.emails`]);
    }
  });

  it('refuses a broker it does not know, as a usage error (exit 2)', async () => {
    const result = await runCli(['relay', '--to', 'kafka://127.0.0.1:9092', '--database-url', t.url]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/unsupported broker kafka:/);
  });

  it('refuses batches in flight outside 1…64, naming the flag (exit 2)', async () => {
    for (const value of ['0', '65', 'x']) {
      const result = await runCli([
        'relay',
        '--to',
        NATS_URL,
        '--max-batches-in-flight',
        value,
        '--database-url',
        t.url,
      ]);
      expect(result.code, value).toBe(2);
      expect(result.stderr, value).toMatch(/--max-batches-in-flight/);
    }
  });
});
