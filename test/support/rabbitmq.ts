/**
 * The machine's RabbitMQ (RABBITMQ_URL, default amqp://guest:guest@127.0.0.1:5672)
 * for the relay's tests: a queue prefix no other test uses, reading a queue's
 * messages back, and deleting the queues a test made.
 */
import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import { decodeRelayedJob, type RelayedJob } from '../../src/relay/message.js';

export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** A queue prefix no other test uses. */
export function uniquePrefix(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

/** Takes every message waiting in `queue` (of the machine's server unless `url` is given; acknowledging them), in order, with its `messageId`. */
export async function drainQueue(
  queue: string,
  url = RABBITMQ_URL,
): Promise<{ job: RelayedJob; messageId: string }[]> {
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    const out: { job: RelayedJob; messageId: string }[] = [];
    for (;;) {
      const message = await channel.get(queue);
      if (message === false) return out;
      out.push({ job: decodeRelayedJob(message.content), messageId: String(message.properties.messageId) });
      channel.ack(message);
    }
  } finally {
    await connection.close();
  }
}

/** Deletes the queues (and their delay queues). */
export async function deleteQueues(names: string[], url = RABBITMQ_URL): Promise<void> {
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    for (const name of names) {
      await channel.deleteQueue(name);
      await channel.deleteQueue(`${name}.delay`);
    }
  } finally {
    await connection.close();
  }
}

/** Messages ready in a RabbitMQ queue (of the machine's server unless `url` names another). */
export async function queueDepth(queue: string, url = RABBITMQ_URL): Promise<number> {
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    const { messageCount } = await channel.checkQueue(queue);
    await channel.close();
    return messageCount;
  } finally {
    await connection.close();
  }
}
