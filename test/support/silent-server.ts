/**
 * A TCP server that accepts connections and never answers: `silent` writes
 * nothing at all (a server or proxy that hangs before the handshake);
 * `after-startup` completes PostgreSQL's startup (AuthenticationOk,
 * ReadyForQuery) and then answers no statement (a server that stops answering
 * mid-session). With `ignoreClose`, it does not close its side when the client
 * closes its own (a network that went silent: the client's FIN never answered).
 */
import { createServer, type Socket } from 'node:net';

/** A running silent server. */
export interface SilentServer {
  port: number;
  /** A URL of it (nobody answers at it). */
  url: string;
  close(): Promise<void>;
}

/** AuthenticationOk ('R', length 8, 0) then ReadyForQuery ('Z', length 5, idle). */
const STARTUP_ANSWER = Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 0, 0x5a, 0, 0, 0, 5, 0x49]);

export async function startSilentServer(
  mode: 'silent' | 'after-startup',
  { ignoreClose = false } = {},
): Promise<SilentServer> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: ignoreClose }, (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    if (mode === 'after-startup') socket.once('data', () => socket.write(STARTUP_ANSWER));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
