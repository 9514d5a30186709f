/**
 * A TCP proxy for network faults between workers and PostgreSQL (node `net`):
 *
 * - `freeze()`: the connections open now go deaf both ways (what they carry
 *   from then on is dropped) while their sockets stay open; new connections
 *   are forwarded as usual (one socket gone half-open).
 * - `partition()` / `heal()`: a silent partition. Every connection, open or
 *   new, stops moving bytes both ways while its sockets stay open (no FIN, no
 *   RST), as behind a dead link or a NAT that lost its entry. The proxy stops
 *   reading, so what either side writes waits in the kernel's buffers and is
 *   delivered in order on `heal()`, as TCP retransmission would deliver it;
 *   a side that closes meanwhile is seen closed by the other only then.
 * - `retarget()`: the address now leads to another server (a failover behind
 *   one address); connections to the old one are cut.
 * - `dropNotifications`: the server's NotificationResponse messages are
 *   removed from the stream, so a LISTEN connection hears nothing while every
 *   query on it still answers (a deaf LISTEN socket). The connections must not
 *   use TLS (the proxy reads the protocol).
 */
import { connect, createServer, type Socket } from 'node:net';

/** Where the proxy forwards to. */
export interface ProxyTarget {
  host: string;
  port: number;
}

export interface NetProxyOptions {
  /** Address to listen on (default 127.0.0.1), on a free port. */
  listenHost?: string;
  /** Remove NotificationResponse messages from what the server sends. */
  dropNotifications?: boolean;
}

/** A running proxy. */
export interface NetProxy {
  readonly host: string;
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  url(url: string): string;
  /** Drops, both ways, what every connection open now carries from now on; its sockets stay open. */
  freeze(): void;
  partition(): void;
  heal(): void;
  retarget(target: ProxyTarget): void;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  /** NotificationResponse messages removed so far. */
  readonly droppedNotifications: number;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  server: Socket | undefined;
  /** One side ended during the partition: the other learns it when the partition heals. */
  ended: boolean;
  /** Frozen: bytes are read and dropped, both ways. */
  frozen: boolean;
}

/** NotificationResponse ('A'): its type byte, then an int32 length that counts itself. */
const NOTIFICATION = 0x41;

/**
 * A filter of the server-to-client stream that removes NotificationResponse
 * messages; it holds back an incomplete message until the rest arrives.
 */
function notificationFilter(onDrop: () => void): (chunk: Buffer) => Buffer {
  let pending: Buffer = Buffer.alloc(0);
  return (chunk) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    const kept: Buffer[] = [];
    let at = 0;
    while (pending.length - at >= 5) {
      const size = 1 + pending.readInt32BE(at + 1);
      if (pending.length - at < size) break;
      if (pending[at] === NOTIFICATION) onDrop();
      else kept.push(pending.subarray(at, at + size));
      at += size;
    }
    pending = pending.subarray(at);
    return Buffer.concat(kept);
  };
}

/** Starts a proxy to `target`. */
export async function startNetProxy(target: ProxyTarget, options: NetProxyOptions = {}): Promise<NetProxy> {
  const listenHost = options.listenHost ?? '127.0.0.1';
  const pairs = new Set<Pair>();
  let current = target;
  let partitioned = false;
  let accepted = 0;
  let dropped = 0;

  const end = (pair: Pair) => {
    if (partitioned) {
      pair.ended = true;
      return;
    }
    pairs.delete(pair);
    pair.client.destroy();
    pair.server?.destroy();
  };
  const link = (pair: Pair) => {
    const server = connect(current.port, current.host);
    pair.server = server;
    const filter = options.dropNotifications
      ? notificationFilter(() => {
          dropped++;
        })
      : (chunk: Buffer) => chunk;
    pair.client.on('data', (chunk) => {
      if (!pair.frozen) server.write(chunk);
    });
    server.on('data', (chunk) => {
      if (pair.frozen) return;
      const out = filter(chunk);
      if (out.length > 0) pair.client.write(out);
    });
    server.on('error', () => end(pair)).on('close', () => end(pair));
    pair.client.resume();
  };

  const proxy = createServer((client) => {
    accepted++;
    const pair: Pair = { client, server: undefined, ended: false, frozen: false };
    pairs.add(pair);
    client.on('error', () => end(pair)).on('close', () => end(pair));
    // Held, unread, until the partition heals: the client's SYN was answered, nothing more.
    client.pause();
    if (!partitioned) link(pair);
  });
  await new Promise<void>((resolve, reject) => {
    proxy.once('error', reject);
    proxy.listen(0, listenHost, () => resolve());
  });
  const address = proxy.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    host: listenHost,
    port,
    url(url) {
      const u = new URL(url);
      u.hostname = listenHost;
      u.port = String(port);
      return u.toString();
    },
    freeze() {
      for (const pair of pairs) pair.frozen = true;
    },
    partition() {
      partitioned = true;
      for (const pair of pairs) {
        pair.client.pause();
        pair.server?.pause();
      }
    },
    heal() {
      partitioned = false;
      for (const pair of [...pairs]) {
        if (pair.ended) end(pair);
        else if (pair.server) {
          pair.server.resume();
          pair.client.resume();
        } else link(pair);
      }
    },
    retarget(next) {
      current = next;
      for (const pair of [...pairs]) {
        pairs.delete(pair);
        pair.client.destroy();
        pair.server?.destroy();
      }
    },
    get accepted() {
      return accepted;
    },
    get open() {
      return pairs.size;
    },
    get droppedNotifications() {
      return dropped;
    },
    async close() {
      partitioned = false;
      for (const pair of [...pairs]) end(pair);
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
