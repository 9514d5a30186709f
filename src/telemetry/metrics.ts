/**
 * Prometheus metrics (prom-client): jobs by queue and status and the oldest due
 * job's age, read from the database at scrape time, and completions, failures
 * and run times per kind, counted from a worker's events.
 *
 * prom-client is an optional peer dependency: it is loaded on first use, and a
 * missing install is reported with the command that fixes it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import { JOB_STATUSES, type JobMap } from '../job/job.js';
import { importOptional } from '../optional-dependency.js';
import { parseOptions } from '../options.js';
import type { Relay } from '../relay/relay.js';
import type { QueueStats, RelayQueueStats, Skiplock } from '../skiplock.js';
import type { Worker } from '../worker/worker.js';

type PromClient = typeof import('prom-client');

/** Options of {@link createMetrics}. */
export interface MetricsOptions {
  /** Registry the metrics are registered on. @default a new prom-client `Registry` of their own */
  registry?: Registry;
  /** Prefix of every metric name. @default 'skiplock_' */
  prefix?: string;
  /** Upper bounds, in seconds, of the run-time histogram's buckets. @default 0.005 s … 300 s */
  durationBuckets?: number[];
}

/** The metrics of one Skiplock; see {@link createMetrics}. */
export interface SkiplockMetrics {
  /** The registry holding the metrics (add your own, or merge it with others). */
  readonly registry: Registry;
  /** The Content-Type of {@link SkiplockMetrics.text}'s output. */
  readonly contentType: string;
  /**
   * Counts a worker's completions, failures and run times from its events.
   * @returns a function that stops observing.
   */
  observeWorker(worker: Worker): () => void;
  /**
   * Counts a relay's published jobs (`relay_published_total` by queue) and its
   * errors (`relay_errors_total` by source) from its events. The first call also
   * registers the gauges read from `relayStats()` at scrape time, per relayed
   * queue of every running relay: `relay_lag_seconds`, `relay_waiting_jobs`
   * and `relay_in_flight_jobs`.
   * @returns a function that stops observing.
   */
  observeRelay(relay: Relay): () => void;
  /**
   * The registry in Prometheus text format; queries the database for the gauges.
   * @throws {DatabaseError} when the database cannot be reached.
   */
  text(): Promise<string>;
}

const DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

const optionsSchema = z.strictObject({
  registry: z
    .custom<Registry>((v) => typeof (v as Registry)?.registerMetric === 'function', {
      error: 'must be a prom-client Registry',
    })
    .optional(),
  prefix: z
    .string({ error: 'must be a string' })
    .regex(/^[a-zA-Z_:][a-zA-Z0-9_:]*$/, { error: 'must be a Prometheus metric name prefix' })
    .optional(),
  durationBuckets: z
    .array(z.number().positive({ error: 'must be positive numbers of seconds' }), {
      error: 'must be an array of seconds',
    })
    .min(1, { error: 'must not be empty' })
    .optional(),
});

/**
 * Loads prom-client.
 *
 * @throws {MissingDependencyError} naming the package and the install command when it is not installed.
 */
export async function loadPromClient(): Promise<PromClient> {
  const mod = await importOptional<PromClient & { default?: PromClient }>('prom-client', {
    packageName: 'prom-client',
    neededFor: 'skiplock metrics',
  });
  return mod.default ?? mod;
}

/**
 * Makes the metrics of a Skiplock:
 * - `skiplock_jobs{queue,status}` (gauge): jobs in the table, every status of every queue present;
 * - `skiplock_oldest_due_job_age_seconds{queue}` (gauge): how long the oldest due queued job has waited (0 when none);
 * - `skiplock_jobs_completed_total{queue,kind}`, `skiplock_jobs_failed_total{queue,kind,outcome}`
 *   (counters; outcome `retry`, `failed` or `dead`) and `skiplock_job_duration_seconds{queue,kind}`
 *   (histogram of succeeded jobs' run times), from the workers given to `observeWorker`.
 *
 * The gauges are read from the database on each scrape (one `stats()` query), so
 * every process reports the whole table; counters cover only this process's workers.
 *
 * @example
 * const metrics = await createMetrics(skiplock);
 * metrics.observeWorker(worker);
 * http.createServer(async (_, res) => res.end(await metrics.text())).listen(9464);
 * @throws {ValidationError} on a bad option.
 * @throws {MissingDependencyError} when prom-client is not installed.
 */
export async function createMetrics<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  options: MetricsOptions = {},
): Promise<SkiplockMetrics> {
  const parsed = parseOptions(optionsSchema, options, 'options');
  const prom = await loadPromClient();
  const registry = parsed.registry ?? new prom.Registry();
  const prefix = parsed.prefix ?? 'skiplock_';
  const readStats = sharedStats(skiplock);

  new prom.Gauge({
    name: `${prefix}jobs`,
    help: 'Jobs in the jobs table by queue and status.',
    labelNames: ['queue', 'status'] as const,
    registers: [registry],
    async collect() {
      const stats = await readStats();
      this.reset();
      for (const queue of new Set(stats.map((s) => s.queue))) {
        for (const status of JOB_STATUSES) {
          const row = stats.find((s) => s.queue === queue && s.status === status);
          this.set({ queue, status }, row?.count ?? 0);
        }
      }
    },
  });
  new prom.Gauge({
    name: `${prefix}oldest_due_job_age_seconds`,
    help: 'Seconds since the oldest due queued job of the queue became due (0 when none is due).',
    labelNames: ['queue'] as const,
    registers: [registry],
    async collect() {
      const stats = await readStats();
      this.reset();
      for (const queue of new Set(stats.map((s) => s.queue))) {
        const row = stats.find((s) => s.queue === queue && s.status === 'queued');
        this.set({ queue }, (row?.oldestQueuedAgeMs ?? 0) / 1000);
      }
    },
  });
  const completed = new prom.Counter({
    name: `${prefix}jobs_completed_total`,
    help: "Jobs whose success this process's workers committed.",
    labelNames: ['queue', 'kind'] as const,
    registers: [registry],
  });
  const failed = new prom.Counter({
    name: `${prefix}jobs_failed_total`,
    help: "Failed attempts this process's workers committed, by what the job became (retry, failed, dead).",
    labelNames: ['queue', 'kind', 'outcome'] as const,
    registers: [registry],
  });
  const duration = new prom.Histogram({
    name: `${prefix}job_duration_seconds`,
    help: "Run time of jobs that succeeded in this process's workers, in seconds.",
    labelNames: ['queue', 'kind'] as const,
    buckets: parsed.durationBuckets ?? DEFAULT_BUCKETS,
    registers: [registry],
  });

  const relayed = new prom.Counter({
    name: `${prefix}relay_published_total`,
    help: "Jobs this process's relays published, saw acknowledged and removed.",
    labelNames: ['queue'] as const,
    registers: [registry],
  });
  const relayErrors = new prom.Counter({
    name: `${prefix}relay_errors_total`,
    help: "Errors this process's relays met (they retry), by source.",
    labelNames: ['source'] as const,
    registers: [registry],
  });

  // The relay gauges read relayStats() on each scrape; registered by the first
  // observeRelay, so a process without a relay makes no such query.
  let relayGauges = false;
  const registerRelayGauges = () => {
    if (relayGauges) return;
    relayGauges = true;
    const readRelayStats = sharedRead(() => skiplock.relayStats());
    const gauge = (name: string, help: string, value: (row: RelayQueueStats) => number) =>
      new prom.Gauge({
        name: `${prefix}${name}`,
        help,
        labelNames: ['queue'] as const,
        registers: [registry],
        async collect() {
          const rows = await readRelayStats();
          this.reset();
          for (const row of rows) this.set({ queue: row.queue }, value(row));
        },
      });
    gauge(
      'relay_lag_seconds',
      "Seconds since the oldest job of a relayed queue that waits to be relayed became due (0 when none waits), by the database's clock.",
      (row) => (row.lagMs ?? 0) / 1000,
    );
    gauge(
      'relay_waiting_jobs',
      'Jobs of a relayed queue that are due and not yet claimed by a relay.',
      (row) => row.waiting,
    );
    gauge(
      'relay_in_flight_jobs',
      'Jobs of a relayed queue that a relay claimed and is publishing.',
      (row) => row.inFlight,
    );
  };

  return {
    registry,
    contentType: registry.contentType,
    observeRelay(relay) {
      registerRelayGauges();
      const onPublish = (jobs: readonly { queue: string }[]) => {
        for (const job of jobs) relayed.inc({ queue: job.queue });
      };
      const onError = (_: unknown, source: string) => relayErrors.inc({ source });
      relay.on('relay:publish', onPublish);
      relay.on('error', onError);
      return () => {
        relay.off('relay:publish', onPublish);
        relay.off('error', onError);
      };
    },
    observeWorker(worker) {
      const onSuccess = (job: { queue: string; kind: string }, info: { durationMs: number }) => {
        completed.inc({ queue: job.queue, kind: job.kind });
        duration.observe({ queue: job.queue, kind: job.kind }, info.durationMs / 1000);
      };
      const onFailure = (job: { queue: string; kind: string }, _: unknown, outcome: { status: string }) => {
        const result = outcome.status === 'queued' ? 'retry' : outcome.status;
        failed.inc({ queue: job.queue, kind: job.kind, outcome: result });
      };
      worker.on('job:success', onSuccess);
      worker.on('job:failure', onFailure);
      return () => {
        worker.off('job:success', onSuccess);
        worker.off('job:failure', onFailure);
      };
    },
    text: () => registry.metrics(),
  };
}

/**
 * One `stats()` query serves every gauge of a scrape: the registry collects the
 * gauges one after the other in the microtasks that follow the query's result,
 * so the result is shared until the next turn of the event loop, never longer.
 */
function sharedStats<Jobs extends JobMap>(skiplock: Skiplock<Jobs>): () => Promise<QueueStats[]> {
  return sharedRead(() => skiplock.stats());
}

/** `read()`'s result, shared by the gauges collected in one scrape (as {@link sharedStats}). */
function sharedRead<T>(read: () => Promise<T>): () => Promise<T> {
  let current: Promise<T> | undefined;
  return () => {
    if (!current) {
      const stats = read();
      current = stats;
      const forget = () =>
        setImmediate(() => {
          if (current === stats) current = undefined;
        });
      stats.then(forget, forget);
    }
    return current;
  };
}

/** A running metrics HTTP server. */
export interface MetricsServer {
  /** `http://host:port/metrics`. */
  url: string;
  /** The port listened on (useful with port 0). */
  port: number;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` (Prometheus text) on its own HTTP server, as
 * `skiplock worker --metrics-port` does. A scrape that cannot reach the database
 * answers 503 with the reason.
 *
 * @param options.port - TCP port; 0 picks a free one.
 * @param options.host - address to listen on. @default '127.0.0.1'
 * @throws {Error} when the port cannot be listened on.
 */
export async function serveMetrics(
  metrics: SkiplockMetrics,
  options: { port: number; host?: string },
): Promise<MetricsServer> {
  const host = options.host ?? '127.0.0.1';
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try GET /metrics\n');
      return;
    }
    metrics.text().then(
      (text) => res.writeHead(200, { 'content-type': metrics.contentType }).end(text),
      (error: unknown) =>
        res
          .writeHead(503, { 'content-type': 'text/plain' })
          .end(`metrics unavailable: ${error instanceof Error ? error.message : String(error)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${port}/metrics`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * A worker's metrics on their own HTTP server: the gauges of `skiplock` and the
 * counters of `worker`, at `http://host:port/metrics`.
 *
 * @throws {MissingDependencyError} when prom-client is not installed.
 * @throws {Error} when the port cannot be listened on.
 */
export async function serveWorkerMetrics<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  worker: Worker,
  options: { port: number; host?: string },
): Promise<MetricsServer> {
  const metrics = await createMetrics(skiplock);
  const stopObserving = metrics.observeWorker(worker);
  const server = await serveMetrics(metrics, options).catch((error: unknown) => {
    stopObserving();
    throw error;
  });
  return {
    ...server,
    close: async () => {
      stopObserving();
      await server.close();
    },
  };
}
