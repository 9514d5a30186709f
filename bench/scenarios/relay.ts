/**
 * Scenario 11, relay throughput (skiplock, NATS JetStream): 20,000 jobs
 * (quick: 5,000; smoke: 200) enqueued by transactions of 100 (as producers
 * commit them; one transaction's jobs share a run_at), then moved from
 * the jobs table to a JetStream stream by 1 and by 2 relays in this process
 * (batchSize 100, lingerMs 20, the default 4 batches in flight). Jobs per
 * second from the relays' start until the table is empty (every job
 * published, acknowledged and removed). Beside them, in the same run, the
 * two limits a relay sits between: the bare one-statement DELETE … SKIP
 * LOCKED at the same batch size on one connection (the database's), and the
 * same number of messages of the same size published to a stream with
 * acknowledgements, 4 windows of 100 at a time, without a database (the
 * broker's and its client's). End to
 * end: a producer enqueues the same number of jobs in batches of 100 while one
 * relay moves them and a `natsWorker` (concurrency 50) runs a no-op handler;
 * jobs per second from the first enqueue to the last handler, and each job's
 * time from its enqueue call to its handler's start. Skipped,
 * with a note, when no NATS server answers at `NATS_URL` (default
 * nats://127.0.0.1:4222) or the NATS packages are missing.
 */
import { natsTarget, natsWorker } from '../../src/brokers/nats.js';
import { quantile } from '../report.js';
import { createRawDatabase, dropRawDatabase, prefill, rawDrain } from '../systems/raw-pg.js';
import { loadEngine, skiplockSystem } from '../systems/skiplock.js';
import { type BenchContext, namespaceFor, type Scenario, waitFor } from './scenario.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const RELAYS = [1, 2] as const;
const BATCH = 100;
const SCENARIO = '11. Relay throughput to NATS JetStream';

type Engine = Awaited<ReturnType<typeof loadEngine>>;

/** What a run gets: a Skiplock on a new database, a new stream, and `startRelay`; all torn down after `run`. */
interface RelayBench {
  skiplock: InstanceType<Engine['Skiplock']>;
  stream: string;
  /** Starts a relay of the default queue to the stream (lingerMs 20), stopped after the run. */
  startRelay(): void;
  /** Stops `service` after the run, before the relays. */
  stopAfter(service: { stop(): Promise<void> }): void;
}

async function withRelayBench<T>(
  ctx: BenchContext,
  name: string,
  run: (bench: RelayBench) => Promise<T>,
): Promise<T> {
  const namespace = namespaceFor('skiplock', name);
  const target = await skiplockSystem.create(ctx.serverUrl, namespace);
  const { Skiplock, createRelay } = await loadEngine();
  const skiplock = new Skiplock({ connectionString: target.databaseUrl });
  const stream = namespace.replace(/[^a-zA-Z0-9_-]/g, '_');
  const running: { stop(): Promise<void> }[] = [];
  try {
    return await run({
      skiplock,
      stream,
      startRelay() {
        const relay = createRelay(skiplock, {
          target: natsTarget({ servers: NATS_URL, stream }),
          handleSignals: false,
          lingerMs: 20,
          batchSize: BATCH,
        });
        relay.on('error', (error, source) => ctx.log(`  relay ${source} error: ${error.message}`));
        running.push(relay);
        relay.start();
      },
      stopAfter: (service) => void running.unshift(service),
    });
  } finally {
    for (const service of running) await service.stop();
    await deleteStream(stream).catch(() => {});
    await skiplock.close();
    await skiplockSystem.destroy(target);
  }
}

/** Queued jobs moved to the stream by `relays` relays: jobs/s. */
function relayOnce(ctx: BenchContext, relays: number, jobs: number): Promise<number> {
  return withRelayBench(ctx, 'relay', async ({ skiplock, startRelay }) => {
    for (let from = 0; from < jobs; from += BATCH)
      await skiplock.enqueueMany(
        Array.from({ length: Math.min(BATCH, jobs - from) }, (_, i) => ({
          kind: 'noop',
          payload: { i: from + i },
        })),
      );
    const startedAt = performance.now();
    for (let i = 0; i < relays; i++) startRelay();
    const count = async () => (await skiplock.stats()).reduce((n, s) => n + s.count, 0);
    if (!(await waitFor(async () => (await count()) === 0, 600_000, 20)))
      throw new Error('the relays did not empty the table within 10 minutes');
    return jobs / ((performance.now() - startedAt) / 1000);
  });
}

/** Producer → relay → NATS → natsWorker: throughput (jobs/s) and enqueue → handler latencies (ms). */
function endToEndOnce(ctx: BenchContext, jobs: number): Promise<{ rate: number; latencies: number[] }> {
  return withRelayBench(ctx, 'relay_e2e', async ({ skiplock, stream, startRelay, stopAfter }) => {
    const latencies: number[] = [];
    startRelay();
    const worker = natsWorker(skiplock, {
      servers: NATS_URL,
      stream,
      concurrency: 50,
      handleSignals: false,
      handlers: {
        noop: (job: { payload: unknown }) => {
          latencies.push(performance.now() - (job.payload as { at: number }).at);
        },
      },
    });
    worker.on('error', (error, source) => ctx.log(`  worker ${source} error: ${error.message}`));
    stopAfter(worker);
    await worker.start();
    const startedAt = performance.now();
    for (let i = 0; i < jobs; i += 100) {
      const at = performance.now();
      await skiplock.enqueueMany(
        Array.from({ length: Math.min(100, jobs - i) }, (_, n) => ({
          kind: 'noop',
          payload: { i: i + n, at },
        })),
      );
    }
    if (!(await waitFor(async () => latencies.length >= jobs, 600_000, 5)))
      throw new Error('the handlers did not run every job within 10 minutes');
    return { rate: jobs / ((performance.now() - startedAt) / 1000), latencies };
  });
}

/** The database's limit: the bare DELETE … SKIP LOCKED of `BATCH` jobs at a time on one connection, jobs/s. */
async function databaseCeilingOnce(ctx: BenchContext, jobs: number): Promise<number> {
  const namespace = namespaceFor('rawpg', 'relay_ceiling');
  const url = await createRawDatabase(ctx.serverUrl, namespace);
  try {
    await prefill(url, jobs);
    return await rawDrain(url, 'delete', BATCH, 1);
  } finally {
    await dropRawDatabase(url, namespace);
  }
}

/**
 * The broker's limit: `jobs` messages the size of a relayed job published to a
 * new stream with message ids, awaiting every acknowledgement, 4 windows of
 * `BATCH` at a time (as a relay's batches in flight), no database; jobs/s.
 */
async function brokerCeilingOnce(jobs: number): Promise<number> {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager, RetentionPolicy } = await import('@nats-io/jetstream');
  const connection = await connect({ servers: NATS_URL, noAsyncTraces: true });
  const stream = namespaceFor('nats', 'ceiling').replace(/[^a-zA-Z0-9_-]/g, '_');
  const manager = await jetstreamManager(connection);
  await manager.streams.add({
    name: stream,
    subjects: [`${stream}.>`],
    retention: RetentionPolicy.Workqueue,
  });
  try {
    const client = jetstream(connection);
    // A relayed job's body: the job as a handler sees it, about 300 bytes.
    const body = (i: number) =>
      Buffer.from(
        JSON.stringify({
          id: String(i),
          queue: 'default',
          kind: 'noop',
          payload: { i },
          priority: 0,
          runAt: new Date().toISOString(),
          createdAt: new Date().toISOString(),
          attempts: 0,
          maxAttempts: 25,
          messageId: `0123456789abcdef.${i}.0`,
        }),
      );
    let next = 0;
    const startedAt = performance.now();
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < jobs) {
          const from = next;
          next = Math.min(jobs, next + BATCH);
          const window: Promise<unknown>[] = [];
          for (let i = from; i < next; i++)
            window.push(client.publish(`${stream}.default`, body(i), { msgID: `0123456789abcdef.${i}.0` }));
          await Promise.all(window);
        }
      }),
    );
    return jobs / ((performance.now() - startedAt) / 1000);
  } finally {
    await manager.streams.delete(stream).catch(() => {});
    await connection.close();
  }
}

async function deleteStream(stream: string): Promise<void> {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const connection = await connect({ servers: NATS_URL });
  try {
    await (await jetstreamManager(connection)).streams.delete(stream);
  } finally {
    await connection.close();
  }
}

async function natsAnswers(): Promise<boolean> {
  try {
    const { connect } = await import('@nats-io/transport-node');
    const connection = await connect({ servers: NATS_URL, timeout: 2000 });
    await connection.close();
    return true;
  } catch {
    return false;
  }
}

export const relayScenario: Scenario = {
  id: 11,
  title: 'Relay throughput to NATS JetStream',
  async run(ctx: BenchContext) {
    if (!(await natsAnswers())) {
      ctx.note(`scenario 11 skipped: no NATS server answers at ${NATS_URL}`);
      return;
    }
    const jobs = ctx.smoke ? 200 : ctx.quick ? 5000 : 20_000;
    for (let run = 0; run < ctx.runs; run++) {
      for (const relays of RELAYS) {
        ctx.log(`  run ${run + 1}: ${relays} relay(s)`);
        ctx.record(
          {
            scenario: SCENARIO,
            case: `${jobs.toLocaleString('en-US')} queued jobs (enqueued by transactions of ${BATCH}) moved to a stream by ${relays} relay${relays > 1 ? 's' : ''} (batchSize ${BATCH}, 4 batches in flight), 1 process`,
            unit: 'jobs/s',
            system: 'skiplock',
            tag: `relay.${relays}`,
          },
          await relayOnce(ctx, relays, jobs),
        );
      }
      ctx.log(`  run ${run + 1}: the database's and the broker's limits`);
      ctx.record(
        {
          scenario: SCENARIO,
          case: `the database's limit: DELETE … SKIP LOCKED (1 statement), batch ${BATCH}, ${jobs.toLocaleString('en-US')} jobs, 1 connection`,
          unit: 'jobs/s',
          system: 'raw-pg',
          tag: 'relay.database-ceiling',
        },
        await databaseCeilingOnce(ctx, jobs),
      );
      ctx.record(
        {
          scenario: SCENARIO,
          case: `the broker's limit: ${jobs.toLocaleString('en-US')} messages of a relayed job's size published with acknowledgements, 4 windows of ${BATCH} at a time, no database`,
          unit: 'jobs/s',
          system: 'skiplock',
          tag: 'relay.broker-ceiling',
        },
        await brokerCeilingOnce(jobs),
      );
      ctx.log(`  run ${run + 1}: end to end`);
      const { rate, latencies } = await endToEndOnce(ctx, jobs);
      const e2e = `${jobs.toLocaleString('en-US')} jobs enqueued in batches of 100 → 1 relay → NATS → natsWorker (concurrency 50), 1 process`;
      ctx.record({ scenario: SCENARIO, case: e2e, unit: 'jobs/s', system: 'skiplock' }, rate);
      for (const [name, q] of [
        ['p50', 0.5],
        ['p99', 0.99],
      ] as const) {
        ctx.record(
          {
            scenario: SCENARIO,
            case: `${e2e}, enqueue → handler start, ${name}`,
            unit: 'ms (lower is better)',
            system: 'skiplock',
          },
          quantile(latencies, q),
        );
      }
    }
  },
};
