/**
 * The brokers' clients are optional packages: without them, `skiplock/nats`
 * and `skiplock/rabbitmq` still import, and connecting fails with a
 * MissingDependencyError naming the package and its install command.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const HIDE = fileURLToPath(new URL('../support/hide-packages.mjs', import.meta.url));

function missing(packageName: string, neededFor: string) {
  return {
    name: 'MissingDependencyError',
    code: 'MISSING_DEPENDENCY',
    packageName,
    message: `${neededFor} needs the package '${packageName}': npm install ${packageName}`,
  };
}

describe('without the broker clients installed', () => {
  it('targets and workers fail to connect with a MissingDependencyError naming the package', async () => {
    const child = fork(
      fileURLToPath(new URL('../processes/without-broker-packages.ts', import.meta.url)),
      [],
      {
        execArgv: ['--import', 'tsx', '--import', HIDE],
        env: { ...process.env, SKIPLOCK_TEST_HIDE: '@nats-io/transport-node,@nats-io/jetstream,amqplib' },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      },
    );
    const [report] = (await Promise.race([
      once(child, 'message'),
      once(child, 'exit').then(([code]) => {
        throw new Error(`the process exited (${String(code)}) without a report`);
      }),
    ])) as [Record<string, unknown>];
    expect(report).toEqual({
      natsTarget: missing('@nats-io/transport-node', 'skiplock/nats'),
      natsWorker: missing('@nats-io/transport-node', 'skiplock/nats'),
      rabbitmqTarget: missing('amqplib', 'skiplock/rabbitmq'),
      rabbitmqWorker: missing('amqplib', 'skiplock/rabbitmq'),
    });
  });
});
