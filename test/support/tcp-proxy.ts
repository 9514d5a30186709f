/**
 * A TCP proxy in front of the suite's server that can stop forwarding on the
 * connections it holds while keeping their sockets open: a half-open
 * connection as a dead NAT entry or a silent network partition leaves it.
 * New connections are forwarded as usual.
 */
import { connect, createServer, type Socket } from 'node:net';

/** A running proxy. */
export interface TcpProxy {
  port: number;
  /** Stops forwarding, both ways, on every connection open now; the sockets stay open. */
  freeze(): void;
  close(): Promise<void>;
}

/** Starts a proxy on a free port of 127.0.0.1 to `host:port`. */
export async function startTcpProxy(host: string, port: number): Promise<TcpProxy> {
  const pairs = new Set<{ client: Socket; server: Socket; frozen: boolean }>();
  const proxy = createServer((client) => {
    const server = connect(port, host);
    const pair = { client, server, frozen: false };
    pairs.add(pair);
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk) => {
        if (!pair.frozen) to.write(chunk);
      });
    forward(client, server);
    forward(server, client);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      server.destroy();
    };
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    freeze() {
      for (const pair of pairs) pair.frozen = true;
    },
    async close() {
      for (const pair of pairs) {
        pair.client.destroy();
        pair.server.destroy();
      }
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
