/**
 * A TCP proxy in front of the suite's server that can stop forwarding while
 * keeping its sockets open: a half-open connection as a dead NAT entry or a
 * silent network partition leaves it.
 *
 * - `freeze()` drops what the connections open now carry from then on; new
 *   connections are forwarded as usual (one socket gone deaf).
 * - `partition()` holds every byte, both ways, on the connections open now and
 *   on new ones (accepted, never connected through), as a network that
 *   passes nothing; `heal()` lets the held bytes through and forwards again,
 *   as TCP's retransmissions do once the network is back.
 */
import { connect, createServer, type Socket } from 'node:net';

/** A running proxy. */
export interface TcpProxy {
  port: number;
  /** Stops forwarding, both ways, on every connection open now; the sockets stay open. */
  freeze(): void;
  /** Passes nothing, both ways, on every connection, open now or opened later, until healed. */
  partition(): void;
  /** Ends a partition: held bytes go through, and new connections reach the server again. */
  heal(): void;
  /** Connections the proxy holds now (client sockets not yet closed). */
  readonly connections: number;
  /** Destroys every connection (as a reset) and stops accepting. */
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  server: Socket | undefined;
  frozen: boolean;
}

/** Starts a proxy on a free port of 127.0.0.1 to `host:port`. */
export async function startTcpProxy(host: string, port: number): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let partitioned = false;

  const end = (pair: Pair) => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.server?.destroy();
  };
  const forward = (pair: Pair, from: Socket, to: Socket) =>
    from.on('data', (chunk) => {
      if (!pair.frozen) to.write(chunk);
    });
  const connectThrough = (pair: Pair) => {
    const server = connect(port, host);
    pair.server = server;
    forward(pair, pair.client, server);
    forward(pair, server, pair.client);
    server.on('error', () => end(pair)).on('close', () => end(pair));
  };

  const proxy = createServer((client) => {
    const pair: Pair = { client, server: undefined, frozen: false };
    pairs.add(pair);
    client.on('error', () => end(pair)).on('close', () => end(pair));
    if (partitioned) {
      // Bytes wait in the socket's buffers (and its close is not seen) until healed.
      client.pause();
      return;
    }
    connectThrough(pair);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
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
      for (const pair of pairs) {
        if (!pair.server) connectThrough(pair);
        pair.client.resume();
        pair.server?.resume();
      }
    },
    get connections() {
      return pairs.size;
    },
    async close() {
      for (const pair of pairs) end(pair);
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
