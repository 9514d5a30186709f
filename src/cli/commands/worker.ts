/**
 * `skiplock worker --handlers FILE`: runs a worker until SIGTERM/SIGINT, then
 * stops it gracefully and exits 0.
 */
import { Command } from 'commander';
import pg from 'pg';
import type { Job } from '../../job/job.js';
import { assertMigrated } from '../../migrations/migrator.js';
import { serveWorkerMetrics } from '../../telemetry/metrics.js';
import {
  kebabCase,
  WORKER_CHOICE_OPTIONS,
  WORKER_NUMBER_OPTIONS,
  WORKER_SWITCH_OPTIONS,
  WORKER_TEXT_OPTIONS,
} from '../../worker/option-specs.js';
import type { WorkerOptions } from '../../worker/options.js';
import type { Worker } from '../../worker/worker.js';
import { type CliDatabase, openDatabaseWith } from '../database.js';
import { maskUrl } from '../embedded.js';
import { errorMessage } from '../error-report.js';
import { addServiceFlags, choice, collect, examples, integer, type ServiceFlags } from '../flags.js';
import { loadHandlersFile } from '../handlers-file.js';
import { createLogger, type Logger } from '../logger.js';
import { addRetentionFlags, type RetentionFlags, retentionFromFlags } from '../retention-flags.js';
import { stopOnSignals } from '../stop-signals.js';
import { UsageError } from '../usage-error.js';

type WorkerOptionFlags = {
  [Name in keyof typeof WORKER_NUMBER_OPTIONS]?: number;
} & {
  [Name in keyof typeof WORKER_CHOICE_OPTIONS]?: (typeof WORKER_CHOICE_OPTIONS)[Name]['choices'][number];
} & {
  [Name in keyof typeof WORKER_TEXT_OPTIONS]?: string;
} & {
  [Name in keyof typeof WORKER_SWITCH_OPTIONS]?: boolean;
};

interface WorkerFlags extends ServiceFlags, WorkerOptionFlags, RetentionFlags {
  handlers?: string;
  maintenanceOnly?: boolean;
  queue?: string[];
}

/**
 * The `worker` command: every worker option is a flag of the same name in kebab
 * case. It exits 1 with one line at start when the database cannot be used.
 */
export function workerCommand(): Command {
  const command = new Command('worker')
    .summary('run a worker')
    .description(
      'Runs a worker: claims jobs of its queues and runs the handlers exported (default export: kind → function) by FILE, an ES module or a .ts file. Logs one JSON line per state change (pino). Stops gracefully on SIGTERM/SIGINT: stops claiming, lets running handlers finish for up to --shutdown-timeout-ms, gives back the rest, exits 0.',
    )
    .option('--handlers <file>', 'module whose default export maps kinds to handlers (.js, .mjs, .ts)')
    .option(
      '--maintenance-only',
      'run no jobs (no --handlers): only sweep dead leases, prune and enqueue schedules',
    )
    .option('--queue <name>', 'queue to claim from, repeatable (default: default)', collect);
  addWorkerOptionFlags(command);
  addRetentionFlags(command);
  addServiceFlags(command);
  return command
    .addHelpText(
      'after',
      examples(
        'skiplock worker --handlers ./handlers.js',
        'skiplock worker --handlers src/handlers.ts --queue emails --queue media --concurrency 20',
        'skiplock worker --handlers ./handlers.js --visibility-timeout-ms 60000 --job-timeout-ms 30000 --on-success keep',
        'skiplock worker --handlers ./handlers.js --database-url $PGBOUNCER_URL --no-prepared-statements --no-session-settings --listen-connection-string $DIRECT_URL',
        'skiplock worker --maintenance-only --retention-ms 604800000',
        'skiplock worker --maintenance-only --retention-ms 604800000 --retention-dead 2592000000 --retention-archive 7776000000',
      ) +
        `\nThe handlers file:\n  export default {\n    send_invoice_email: async (job, { signal }) => { /* job.payload */ },\n  };\n`,
    )
    .action(async (flags: WorkerFlags) => {
      if (flags.maintenanceOnly && flags.handlers !== undefined)
        throw new UsageError('--maintenance-only runs no jobs: give it without --handlers');
      if (!flags.maintenanceOnly && flags.handlers === undefined)
        throw new UsageError('give --handlers FILE (or --maintenance-only for a worker that runs no jobs)');
      const handlers = flags.handlers === undefined ? {} : await loadHandlersFile(flags.handlers);
      const logger = createLogger(flags.logLevel);
      const { db, worker, metrics } = await openDatabaseWith(flags, async (db) => {
        await assertDatabaseUsable(db);
        const worker = db.skiplock.worker({
          ...workerOptions(flags),
          handlers,
          handleSignals: false,
          ...(flags.maintenanceOnly && { maintenanceOnly: true }),
        });
        const metrics =
          flags.metricsPort === undefined
            ? undefined
            : await serveWorkerMetrics(db.skiplock, worker, {
                port: flags.metricsPort,
                host: flags.metricsHost,
              });
        return { worker, metrics };
      });
      logEvents(worker, logger);
      const started = worker.start();
      const stopped = stopOnSignals(
        (signal) => {
          logger.info(
            { signal, running: worker.activeCount, shutdownTimeoutMs: worker.options.shutdownTimeoutMs },
            'stopping: no new claims; running jobs finish or are released',
          );
          // A signal during start waits for it, so stop never races start.
          return started.catch(() => {}).then(() => worker.stop());
        },
        (signal) =>
          logger.warn(
            { signal },
            'second signal: exiting now; running jobs come back after the visibility timeout',
          ),
      );
      await started;
      const { handlers: loaded, ...settings } = worker.options;
      logger.info(
        {
          schema: db.skiplock.schema,
          kinds: [...loaded.keys()],
          ...settings,
          listenConnectionString:
            worker.options.listenConnectionString && maskUrl(worker.options.listenConnectionString),
          workerId: worker.id,
        },
        worker.options.maintenanceOnly
          ? 'maintenance-only worker started (runs no jobs)'
          : `worker started on queues ${worker.options.queues.join(', ')} for kinds ${[...loaded.keys()].join(', ')}`,
      );
      // A parent that forked this process (skiplock demo) waits for this before producing.
      process.send?.({ event: 'worker:started', workerId: worker.id });
      if (metrics) logger.info({ url: metrics.url }, `metrics at ${metrics.url}`);
      await stopped;
      await metrics?.close();
      await db.close();
      logger.info({ workerId: worker.id }, 'worker stopped');
      // The handlers module may hold open handles (its own pool, timers): do not wait for them.
      process.exit(0);
    });
}

/** How long the start-up check waits for a connection, and for its answer. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Fails fast, before the worker starts, when it could never work: the database
 * cannot be reached (refused, unknown host, no such database, wrong password)
 * or its schema is not migrated. Once started, outages are retried instead.
 */
export async function assertDatabaseUsable(db: CliDatabase): Promise<void> {
  const client = new pg.Client({
    connectionString: db.url,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: CONNECT_TIMEOUT_MS,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (error) {
    throw new Error(`cannot connect to ${maskUrl(db.url)}: ${errorMessage(error)}`, { cause: error });
  } finally {
    await client.end().catch(() => {});
  }
  await assertMigrated(db.skiplock.pool, db.skiplock.schema);
}

/** One flag per worker option, built from the option definitions (`batchSize` → `--batch-size <n>`). */
function addWorkerOptionFlags(command: Command): void {
  for (const [name, spec] of Object.entries(WORKER_NUMBER_OPTIONS)) {
    const value = spec.unit === 'milliseconds' ? '<ms>' : '<n>';
    command.option(`--${kebabCase(name)} ${value}`, spec.help, integer(spec.min, spec.max));
  }
  for (const [name, spec] of Object.entries(WORKER_CHOICE_OPTIONS))
    command.addOption(choice(`--${kebabCase(name)} <value>`, spec.help, spec.choices));
  for (const [name, spec] of Object.entries(WORKER_TEXT_OPTIONS))
    command.option(`--${kebabCase(name)} <text>`, spec.help);
  for (const [name, spec] of Object.entries(WORKER_SWITCH_OPTIONS))
    command.option(`--no-${kebabCase(name)}`, spec.help);
}

/** The worker options given as flags (the others keep the library's defaults). */
function workerOptions(flags: WorkerFlags): Omit<WorkerOptions<Record<string, unknown>>, 'handlers'> {
  const options: Record<string, unknown> = {};
  if (flags.queue) options.queues = flags.queue;
  const retention = retentionFromFlags(flags);
  if (retention) options.retention = retention;
  for (const name of [
    ...Object.keys(WORKER_NUMBER_OPTIONS),
    ...Object.keys(WORKER_CHOICE_OPTIONS),
    ...Object.keys(WORKER_TEXT_OPTIONS),
  ] as (keyof WorkerOptionFlags)[]) {
    if (flags[name] !== undefined) options[name] = flags[name];
  }
  // commander sets a `--no-x` switch to true unless given; only `false` differs from the default.
  for (const name of Object.keys(WORKER_SWITCH_OPTIONS) as (keyof typeof WORKER_SWITCH_OPTIONS)[]) {
    if (flags[name] === false) options[name] = false;
  }
  return options as Omit<WorkerOptions<Record<string, unknown>>, 'handlers'>;
}

function jobLogFields(job: Job) {
  return {
    jobId: job.id,
    kind: job.kind,
    queue: job.queue,
    attempt: job.attempts,
    maxAttempts: job.maxAttempts,
  };
}

function errorText(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return typeof error === 'string' ? error : (JSON.stringify(error) ?? String(error));
}

/** One log line per state change; successes at debug so high rates stay quiet. */
function logEvents(worker: Worker, logger: Logger): void {
  worker.on('job:start', (job) => logger.info(jobLogFields(job), 'job started'));
  worker.on('job:success', (job, { durationMs }) =>
    logger.debug({ ...jobLogFields(job), durationMs }, 'job succeeded'),
  );
  worker.on('job:failure', (job, _thrown, outcome) => {
    const fields = { ...jobLogFields(job), error: errorText(outcome.lastError), status: outcome.status };
    if (outcome.status === 'queued')
      logger.info({ ...fields, retryDelayMs: outcome.retryDelayMs }, 'job failed; retry after backoff');
    else if (outcome.status === 'failed') logger.warn(fields, 'job failed permanently');
    else logger.warn(fields, 'job dead: out of attempts, in the dead letter');
  });
  worker.on('job:released', (job) =>
    logger.info(jobLogFields(job), 'job released on shutdown (attempt not charged)'),
  );
  worker.on('job:stale', (job) =>
    logger.info(
      jobLogFields(job),
      'result not written: the lease was reclaimed, the next attempt owns the job',
    ),
  );
  worker.on('lease:lost', (job) =>
    logger.info(jobLogFields(job), 'lease lost: the job was reclaimed; handler aborted'),
  );
  worker.on('worker:sweep', (result) =>
    logger.info(result, 'sweep reclaimed jobs with dead leases or expired jobs past their start deadline'),
  );
  worker.on('worker:listen', () => logger.debug('listening for new jobs'));
  worker.on('worker:warning', (message) => logger.warn(message));
  worker.on('error', (error, source) => logger.error({ source, err: error }, `${source} error (retrying)`));
}
