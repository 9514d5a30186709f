/**
 * `skiplock worker --handlers FILE`: runs a worker until SIGTERM/SIGINT, then
 * stops it gracefully and exits 0.
 */
import { Command } from 'commander';
import type { Job } from '../../job/job.js';
import type { WorkerOptions } from '../../worker/options.js';
import type { Worker } from '../../worker/worker.js';
import { openDatabase } from '../database.js';
import { maskUrl } from '../embedded.js';
import {
  addConnectionFlags,
  type ConnectionFlags,
  choice,
  collect,
  examples,
  integer,
  milliseconds,
} from '../flags.js';
import { loadHandlersFile } from '../handlers-file.js';
import { createLogger, LOG_LEVELS, type Logger, type LogLevel } from '../logger.js';

interface WorkerFlags extends ConnectionFlags {
  handlers: string;
  queue?: string[];
  concurrency?: number;
  batchSize?: number;
  pollIntervalMs?: number;
  visibilityTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  sweepIntervalMs?: number;
  jobTimeoutMs?: number;
  shutdownTimeoutMs?: number;
  onSuccess?: 'delete' | 'keep' | 'archive';
  workerId?: string;
  listen?: boolean;
  listenConnectionString?: string;
  listenProbeIntervalMs?: number;
  preparedStatements?: boolean;
  sessionSettings?: boolean;
  logLevel: LogLevel;
}

/** The `worker` command: every worker option (SPEC §7) is a flag of the same name in kebab case. */
export function workerCommand(): Command {
  const command = new Command('worker')
    .summary('run a worker')
    .description(
      'Runs a worker: claims jobs of its queues and runs the handlers exported (default export: kind → function) by FILE, an ES module or a .ts file. Logs one JSON line per state change (pino). Stops gracefully on SIGTERM/SIGINT: stops claiming, lets running handlers finish for up to --shutdown-timeout-ms, gives back the rest, exits 0.',
    )
    .requiredOption(
      '--handlers <file>',
      'module whose default export maps kinds to handlers (.js, .mjs, .ts)',
    )
    .option('--queue <name>', 'queue to claim from, repeatable (default: default)', collect)
    .option('--concurrency <n>', 'handlers running at once (default 10)', integer(1, 10_000))
    .option(
      '--batch-size <n>',
      'jobs per claim, at most the free slots (default: concurrency)',
      integer(1, 10_000),
    )
    .option('--poll-interval-ms <ms>', 'safety-net poll interval (default 2000)', milliseconds(10))
    .option(
      '--visibility-timeout-ms <ms>',
      'age of a lease after which the sweeper reclaims the job (default 300000)',
      milliseconds(100),
    )
    .option(
      '--heartbeat-interval-ms <ms>',
      'how often running jobs’ leases are refreshed (default: visibility timeout / 5)',
      milliseconds(10),
    )
    .option(
      '--sweep-interval-ms <ms>',
      'how often to try reclaiming dead leases (default 60000)',
      milliseconds(10),
    )
    .option(
      '--job-timeout-ms <ms>',
      'handler run time after which the attempt fails (default: none)',
      milliseconds(1),
    )
    .option(
      '--shutdown-timeout-ms <ms>',
      'on stop, how long running handlers may finish before they are aborted and released (default 30000)',
      milliseconds(0),
    )
    .addOption(
      choice('--on-success <policy>', 'what happens to a succeeded job (default delete)', [
        'delete',
        'keep',
        'archive',
      ]),
    )
    .option('--worker-id <id>', 'id recorded in locked_by (default: host:pid:random)')
    .option('--no-listen', 'open no LISTEN connection: find jobs by polling only')
    .option(
      '--listen-connection-string <url>',
      'a direct URL for the LISTEN connection (behind PgBouncer in transaction mode)',
    )
    .option(
      '--listen-probe-interval-ms <ms>',
      'how often the LISTEN connection checks that it hears (default 30000)',
      milliseconds(100),
    )
    .option('--no-prepared-statements', 'send the claim unnamed (PgBouncer in transaction mode)')
    .option('--no-session-settings', 'no startup options on the worker’s connections (PgBouncer)')
    .addOption(choice('--log-level <level>', 'log level', LOG_LEVELS).default('info'));
  addConnectionFlags(command);
  return command
    .addHelpText(
      'after',
      examples(
        'skiplock worker --handlers ./handlers.js',
        'skiplock worker --handlers src/handlers.ts --queue emails --queue media --concurrency 20',
        'skiplock worker --handlers ./handlers.js --visibility-timeout-ms 60000 --job-timeout-ms 30000 --on-success keep',
        'skiplock worker --handlers ./handlers.js --database-url $PGBOUNCER_URL --no-prepared-statements --no-session-settings --listen-connection-string $DIRECT_URL',
      ) +
        `\nThe handlers file:\n  export default {\n    send_invoice_email: async (job, { signal }) => { /* job.payload */ },\n  };\n`,
    )
    .action(async (flags: WorkerFlags) => {
      const handlers = await loadHandlersFile(flags.handlers);
      const logger = createLogger(flags.logLevel);
      const db = await openDatabase(flags);
      let worker: Worker;
      try {
        worker = db.skiplock.worker({ ...workerOptions(flags), handlers, handleSignals: false });
      } catch (error) {
        await db.close();
        throw error;
      }
      logEvents(worker, logger);
      const started = worker.start();
      const stopped = new Promise<void>((resolve, reject) => {
        let stoppingAt: number | undefined;
        const onSignal = (signal: NodeJS.Signals) => {
          // The same signal often arrives twice at once (to the process and to its group): only a
          // later one, a person insisting, forces the exit.
          if (stoppingAt !== undefined && Date.now() - stoppingAt < 1000) return;
          if (stoppingAt !== undefined) {
            logger.warn(
              { signal },
              'second signal: exiting now; running jobs come back after the visibility timeout',
            );
            process.exit(1);
          }
          stoppingAt = Date.now();
          logger.info(
            { signal, running: worker.activeCount, shutdownTimeoutMs: worker.options.shutdownTimeoutMs },
            'stopping: no new claims; running jobs finish or are released',
          );
          // A signal during start waits for it, so stop never races start.
          started
            .catch(() => {})
            .then(() => worker.stop())
            .then(resolve, reject);
        };
        process.on('SIGTERM', onSignal);
        process.on('SIGINT', onSignal);
      });
      await started;
      logger.info(
        {
          schema: db.skiplock.schema,
          ...worker.options,
          listenConnectionString:
            worker.options.listenConnectionString && maskUrl(worker.options.listenConnectionString),
          workerId: worker.id,
        },
        `worker started on queues ${worker.options.queues.join(', ')}`,
      );
      // A parent that forked this process (skiplock demo) waits for this before producing.
      process.send?.({ event: 'worker:started', workerId: worker.id });
      await stopped;
      await db.close();
      logger.info({ workerId: worker.id }, 'worker stopped');
      // The handlers module may hold open handles (its own pool, timers): do not wait for them.
      process.exit(0);
    });
}

function workerOptions(flags: WorkerFlags): Omit<WorkerOptions<Record<string, unknown>>, 'handlers'> {
  const options: Omit<WorkerOptions<Record<string, unknown>>, 'handlers'> = {};
  if (flags.queue) options.queues = flags.queue;
  if (flags.concurrency !== undefined) options.concurrency = flags.concurrency;
  if (flags.batchSize !== undefined) options.batchSize = flags.batchSize;
  if (flags.pollIntervalMs !== undefined) options.pollIntervalMs = flags.pollIntervalMs;
  if (flags.visibilityTimeoutMs !== undefined) options.visibilityTimeoutMs = flags.visibilityTimeoutMs;
  if (flags.heartbeatIntervalMs !== undefined) options.heartbeatIntervalMs = flags.heartbeatIntervalMs;
  if (flags.sweepIntervalMs !== undefined) options.sweepIntervalMs = flags.sweepIntervalMs;
  if (flags.jobTimeoutMs !== undefined) options.jobTimeoutMs = flags.jobTimeoutMs;
  if (flags.shutdownTimeoutMs !== undefined) options.shutdownTimeoutMs = flags.shutdownTimeoutMs;
  if (flags.onSuccess !== undefined) options.onSuccess = flags.onSuccess;
  if (flags.workerId !== undefined) options.workerId = flags.workerId;
  if (flags.listen === false) options.listen = false;
  if (flags.listenConnectionString !== undefined)
    options.listenConnectionString = flags.listenConnectionString;
  if (flags.listenProbeIntervalMs !== undefined) options.listenProbeIntervalMs = flags.listenProbeIntervalMs;
  if (flags.preparedStatements === false) options.preparedStatements = false;
  if (flags.sessionSettings === false) options.sessionSettings = false;
  return options;
}

function describe(job: Job) {
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
  worker.on('job:start', (job) => logger.info(describe(job), 'job started'));
  worker.on('job:success', (job, { durationMs }) =>
    logger.debug({ ...describe(job), durationMs }, 'job succeeded'),
  );
  worker.on('job:failure', (job, error, outcome) => {
    const fields = { ...describe(job), error: errorText(error), status: outcome.status };
    if (outcome.status === 'queued')
      logger.info({ ...fields, retryDelayMs: outcome.retryDelayMs }, 'job failed; retry after backoff');
    else if (outcome.status === 'failed') logger.warn(fields, 'job failed permanently');
    else logger.warn(fields, 'job dead: out of attempts, in the dead letter');
  });
  worker.on('job:released', (job) =>
    logger.info(describe(job), 'job released on shutdown (attempt not charged)'),
  );
  worker.on('job:stale', (job) =>
    logger.info(describe(job), 'result not written: the lease was reclaimed, the next attempt owns the job'),
  );
  worker.on('lease:lost', (job) =>
    logger.info(describe(job), 'lease lost: the job was reclaimed; handler aborted'),
  );
  worker.on('worker:sweep', (result) => logger.info(result, 'sweep reclaimed jobs with dead leases'));
  worker.on('worker:listen', () => logger.debug('listening for new jobs'));
  worker.on('worker:warning', (message) => logger.warn(message));
  worker.on('error', (error, source) => logger.error({ source, err: error }, `${source} error (retrying)`));
}
