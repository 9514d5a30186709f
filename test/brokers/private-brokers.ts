/**
 * Broker servers of a test's own, to crash and restart mid-stream without
 * disturbing the machine's shared NATS and RabbitMQ (other test files use them
 * at the same time): a NATS server with JetStream, or a RabbitMQ node, on a
 * free port with a store directory that survives its restarts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/cli/postgres-programs.js';
import { until } from '../support/nats.js';
import type { ProcessOwner } from '../support/processes.js';

/** A broker server the test owns. */
export interface PrivateBroker {
  /** Its URL (`nats://…` or `amqp://guest:guest@…`). */
  readonly url: string;
  /**
   * Sends `signal` to it (SIGKILL: a crash; SIGTERM: a clean shutdown) and
   * waits until it exited and its port is closed.
   */
  stop(signal: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  /**
   * Starts it again on the same port and store, with `env` over the
   * environment it was first given, and waits until it accepts connections.
   */
  start(env?: Record<string, string>): Promise<void>;
}

/** How to run one broker server. */
interface ServerCommand {
  command: string;
  args: string[];
  env?: Record<string, string>;
}

/** Longest a broker takes to listen, on a loaded 2-core machine (a RabbitMQ node boots in ~15 s there). */
const START_TIMEOUT_MS = 90_000;

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Runs `command` in a process group of its own (a RabbitMQ node is a shell
 * script and the Erlang VM it starts), killed with its group after the test;
 * the store directory is removed then.
 */
async function privateBroker(
  owner: ProcessOwner,
  url: string,
  port: number,
  dir: string,
  command: ServerCommand,
): Promise<PrivateBroker> {
  let child: ChildProcess | undefined;
  const stop = async (signal: 'SIGKILL' | 'SIGTERM') => {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exit = once(running, 'exit');
    process.kill(-running.pid!, signal);
    await exit;
    await until(async () => !(await accepts(port)), `port ${port} closed`, START_TIMEOUT_MS);
  };
  const broker: PrivateBroker = {
    url,
    stop,
    async start(env) {
      if (child) throw new Error('the broker runs already');
      child = spawn(command.command, command.args, {
        detached: true,
        stdio: 'ignore',
        env: { ...process.env, ...command.env, ...env },
      });
      const started = child;
      await until(
        async () => {
          if (started.exitCode !== null) throw new Error(`${command.command} exited (${started.exitCode})`);
          return accepts(port);
        },
        `${command.command} listening on ${port}`,
        START_TIMEOUT_MS,
      );
    },
  };
  owner.defer(async () => {
    await stop('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });
  await broker.start();
  return broker;
}

/** A NATS server with JetStream on a free port, its store in a new directory. */
export async function startPrivateNats(owner: ProcessOwner): Promise<PrivateBroker> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'skiplock-nats-'));
  return privateBroker(owner, `nats://127.0.0.1:${port}`, port, dir, {
    command: process.env.NATS_SERVER ?? '/usr/sbin/nats-server',
    args: ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir],
  });
}

/** The environment that sets a private RabbitMQ node's `max_message_size`, in bytes (for `start`). */
export function maxMessageSizeEnv(bytes: number): Record<string, string> {
  return { RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: `-rabbit max_message_size ${bytes}` };
}

/**
 * A RabbitMQ node of its own (`skiplock-test-<pid>-<port>@localhost`, no
 * plugins, no config file) on a free port, its database in a new directory.
 * It runs as the current user, so the machine's node and its files are left
 * alone. `maxMessageBytes` sets its `max_message_size` (default 128 MiB).
 */
export async function startPrivateRabbitmq(
  owner: ProcessOwner,
  { maxMessageBytes }: { maxMessageBytes?: number } = {},
): Promise<PrivateBroker> {
  const port = await freePort();
  const distPort = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'skiplock-rabbitmq-'));
  return privateBroker(owner, `amqp://guest:guest@127.0.0.1:${port}`, port, dir, {
    // The server script itself, not the /usr/sbin wrapper, which switches to the
    // `rabbitmq` user in a session of its own (its node would escape the kill).
    command: process.env.RABBITMQ_SERVER ?? '/usr/lib/rabbitmq/bin/rabbitmq-server',
    args: [],
    env: {
      HOME: dir,
      RABBITMQ_NODENAME: `skiplock-test-${process.pid}-${port}@localhost`,
      RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
      RABBITMQ_NODE_PORT: String(port),
      RABBITMQ_DIST_PORT: String(distPort),
      RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
      RABBITMQ_LOG_BASE: join(dir, 'log'),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
      RABBITMQ_CONFIG_FILE: join(dir, 'none'),
      ...(maxMessageBytes !== undefined && maxMessageSizeEnv(maxMessageBytes)),
    },
  });
}
