/**
 * The machine's NATS server with JetStream (NATS_URL, default
 * nats://127.0.0.1:4222) for the relay's tests: unique stream names, and
 * reading back every message a stream holds.
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { decodeRelayedJob, type RelayedJob } from '../../src/relay/message.js';

export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

/** A stream name no other test uses. */
export function uniqueStream(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

/** A connection for assertions (to the machine's server unless `servers` is given); close it after the test. */
export function natsConnection(servers = NATS_URL): Promise<NatsConnection> {
  return connect({ servers });
}

/** The max_payload of the machine's NATS server, in bytes. */
export async function serverMaxPayload(): Promise<number> {
  const connection = await natsConnection();
  try {
    return connection.info!.max_payload;
  } finally {
    await connection.close();
  }
}

/**
 * Every message `stream` holds, in order, with the broker's message id, read
 * over a connection of its own (to the machine's server unless `servers` is given).
 */
export async function streamMessages(
  stream: string,
  servers = NATS_URL,
): Promise<{ job: RelayedJob; msgId: string | undefined }[]> {
  const connection = await natsConnection(servers);
  try {
    const manager = await jetstreamManager(connection);
    const info = await manager.streams.info(stream);
    const out: { job: RelayedJob; msgId: string | undefined }[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const message = await manager.streams.getMessage(stream, { seq }).catch(() => null);
      if (message)
        out.push({ job: decodeRelayedJob(message.data), msgId: message.header?.get('Nats-Msg-Id') });
    }
    return out;
  } finally {
    await connection.close();
  }
}

/**
 * Whether the durable consumer `consumer` of `stream` has nothing left to
 * deliver and no delivery awaiting its acknowledgement: no copy can come again.
 */
export async function consumerSettled(stream: string, consumer: string): Promise<boolean> {
  const connection = await natsConnection();
  try {
    const manager = await jetstreamManager(connection);
    const info = await manager.consumers.info(stream, consumer);
    return info.num_pending === 0 && info.num_ack_pending === 0;
  } finally {
    await connection.close();
  }
}

/** Deletes the stream (and its consumers) of the machine's server. */
export async function deleteStream(stream: string): Promise<void> {
  const connection = await natsConnection();
  try {
    const manager = await jetstreamManager(connection);
    await manager.streams.delete(stream).catch(() => {});
  } finally {
    await connection.close();
  }
}

/** Waits until `condition` holds, checking every 50 ms, or fails after `timeoutMs`. */
export async function until(condition: () => Promise<boolean> | boolean, what: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
