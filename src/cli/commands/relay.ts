/**
 * `skiplock relay --to nats://HOST:PORT`: relays the jobs of some queues to a
 * broker until SIGTERM/SIGINT, then stops gracefully (the batches in flight are
 * published and removed, or given back) and exits 0.
 */
import { Command } from 'commander';
import { natsTarget } from '../../brokers/nats.js';
import { rabbitmqTarget } from '../../brokers/rabbitmq.js';
import { definedOnly } from '../../options.js';
import { createRelay, type Relay, type RelayTarget } from '../../relay/relay.js';
import { createMetrics, type MetricsServer, serveMetrics } from '../../telemetry/metrics.js';
import { openDatabaseWith } from '../database.js';
import { maskUrl } from '../embedded.js';
import { addServiceFlags, collect, examples, integer, milliseconds, type ServiceFlags } from '../flags.js';
import { createLogger, type Logger } from '../logger.js';
import { stopOnSignals } from '../stop-signals.js';
import { UsageError } from '../usage-error.js';
import { assertDatabaseUsable } from './worker.js';

interface RelayFlags extends ServiceFlags {
  to: string;
  stream: string;
  rabbitmqQueue: string;
  queue?: string[];
  batchSize?: number;
  maxBatchesInFlight?: number;
  lingerMs?: number;
  visibilityTimeoutMs?: number;
  publishTimeoutMs?: number;
  sweepIntervalMs?: number;
}

/** The `relay` command. It exits 1 with one line at start when the database or the broker address cannot be used. */
export function relayCommand(): Command {
  const command = new Command('relay')
    .summary('relay jobs to a broker (NATS JetStream, RabbitMQ)')
    .description(
      'Relays the jobs of its queues to a broker: claims committed, due jobs with SKIP LOCKED, publishes them, waits for every acknowledgement, then deletes them. A relay killed at any point publishes the jobs again under the same message id, which the broker drops within its duplicate window. Several relays share the work. Stops gracefully on SIGTERM/SIGINT.',
    )
    .requiredOption(
      '--to <url>',
      'the broker: nats://HOST:PORT (NATS JetStream) or amqp://USER:PASSWORD@HOST:PORT (RabbitMQ)',
    )
    .option('--stream <name>', 'NATS: the JetStream stream (created when missing)', 'skiplock')
    .option(
      '--rabbitmq-queue <prefix>',
      'RabbitMQ: jobs of queue Q go to the quorum queue PREFIX.Q (created when missing)',
      'skiplock',
    )
    .option('--queue <name>', 'queue to relay, repeatable (default: default)', collect)
    .option('--batch-size <n>', 'jobs per batch (default 100)', integer(1, 10_000))
    .option(
      '--max-batches-in-flight <n>',
      "batches published at once, each waiting for the broker's acknowledgements (default 4)",
      integer(1, 64),
    )
    .option('--linger-ms <ms>', 'wait after a batch that was not full (default 200)', milliseconds(1))
    .option(
      '--visibility-timeout-ms <ms>',
      'lease of a batch being published (default 60000)',
      milliseconds(1000),
    )
    .option(
      '--publish-timeout-ms <ms>',
      "wait for the broker's acknowledgements (default 10000)",
      milliseconds(1),
    )
    .option(
      '--sweep-interval-ms <ms>',
      "how often to give back a dead relay's jobs and expire jobs past their start deadline (default 60000)",
      milliseconds(1),
    );
  addServiceFlags(command);
  return command
    .addHelpText(
      'after',
      examples(
        'skiplock relay --to nats://127.0.0.1:4222 --queue emails',
        'skiplock relay --to nats://nats.internal:4222 --stream jobs --queue emails --queue media --batch-size 500',
        'skiplock relay --to amqp://guest:guest@127.0.0.1:5672 --queue emails',
      ),
    )
    .action(async (flags: RelayFlags) => {
      const target = targetOf(flags);
      const logger = createLogger(flags.logLevel);
      const { db, relay, metrics } = await openDatabaseWith(flags, async (db) => {
        await assertDatabaseUsable(db);
        const relay = createRelay(db.skiplock, {
          target,
          handleSignals: false,
          ...(flags.queue && { queues: flags.queue }),
          ...definedOnly({
            batchSize: flags.batchSize,
            maxBatchesInFlight: flags.maxBatchesInFlight,
            lingerMs: flags.lingerMs,
            visibilityTimeoutMs: flags.visibilityTimeoutMs,
            publishTimeoutMs: flags.publishTimeoutMs,
            sweepIntervalMs: flags.sweepIntervalMs,
          }),
        });
        let metrics: MetricsServer | undefined;
        if (flags.metricsPort !== undefined) {
          const registry = await createMetrics(db.skiplock);
          registry.observeRelay(relay);
          metrics = await serveMetrics(registry, { port: flags.metricsPort, host: flags.metricsHost });
        }
        return { relay, metrics };
      });
      logEvents(relay, logger);
      const stopped = stopOnSignals(
        (signal) => {
          logger.info({ signal }, 'stopping: the batches in flight are published or given back');
          return relay.stop();
        },
        (signal) =>
          logger.warn(
            { signal },
            'second signal: exiting now; the batches in flight are relayed again later',
          ),
      );
      relay.start();
      logger.info(
        { schema: db.skiplock.schema, to: maskUrl(flags.to), broker: target.name, relayId: relay.id },
        `relay started on queues ${relay.queues.join(', ')}`,
      );
      process.send?.({ event: 'relay:started', relayId: relay.id });
      if (metrics) logger.info({ url: metrics.url }, `metrics at ${metrics.url}`);
      await stopped;
      await metrics?.close();
      await db.close();
      logger.info({ relayId: relay.id, ...relay.metrics }, 'relay stopped');
      process.exit(0);
    });
}

function targetOf(flags: RelayFlags): RelayTarget {
  let url: URL;
  try {
    url = new URL(flags.to);
  } catch {
    throw new UsageError(`--to must be a URL such as nats://127.0.0.1:4222, got ${JSON.stringify(flags.to)}`);
  }
  if (url.protocol === 'nats:' || url.protocol === 'tls:')
    return natsTarget({ servers: flags.to, stream: flags.stream });
  if (url.protocol === 'amqp:' || url.protocol === 'amqps:')
    return rabbitmqTarget({ url: flags.to, queue: flags.rabbitmqQueue });
  throw new UsageError(
    `--to: unsupported broker ${url.protocol}// (give nats://HOST:PORT or amqp://HOST:PORT)`,
  );
}

/** One log line per batch at debug, and every error. */
function logEvents(relay: Relay, logger: Logger): void {
  relay.on('relay:publish', (jobs) => logger.debug({ count: jobs.length }, 'batch published and removed'));
  relay.on('relay:release', (count) => logger.warn({ count }, 'jobs not acknowledged: given back'));
  relay.on('error', (error, source) => logger.error({ source, err: error }, `${source} error (retrying)`));
}
