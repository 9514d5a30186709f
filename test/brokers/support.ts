/**
 * What the relay's and broker-side workers' tests share: relays and workers
 * stopped after the test, NATS streams and RabbitMQ queues no other test uses
 * (deleted after it), and the ledger of an idempotent handler run in worker
 * processes (its effects, keyed by job id, and every delivery).
 */
import type { ChildProcess } from 'node:child_process';
import { expect } from 'vitest';
import type { BrokerWorkerOptions } from '../../src/brokers/broker-worker.js';
import type { NatsWorker } from '../../src/brokers/nats.js';
import { type RabbitmqWorker, rabbitmqQueueName } from '../../src/brokers/rabbitmq.js';
import {
  createRelay,
  type Job,
  type JobMap,
  type Relay,
  type RelayOptions,
  type RelayTarget,
} from '../../src/index.js';
import { tableIn } from '../support/database.js';
import type { TestContext } from '../support/fixture.js';
import { deleteStream, uniqueStream, until } from '../support/nats.js';
import { startNetProxy } from '../support/net-proxy.js';
import { forkScript, killedAfterTest, sent } from '../support/processes.js';
import { deleteQueues, RABBITMQ_URL, uniquePrefix } from '../support/rabbitmq.js';

/** Helpers bound to a test file's fixture; every cleanup runs after each test. */
export interface BrokerTest {
  /** A new NATS stream name on the machine's server, deleted after the test. */
  stream(prefix?: string): string;
  /** A new RabbitMQ queue prefix; the queues of `queues` under it are deleted after the test. */
  rabbitmqPrefix(queues: string[], prefix?: string, url?: string): string;
  /** A relay (not started) with `lingerMs` 20 and no signal handling; errors are ignored; stopped after the test. */
  relay(options: RelayOptions): Relay;
  /** Starts `worker` (errors ignored) and stops it after the test. */
  started<W extends NatsWorker | RabbitmqWorker>(worker: W): Promise<W>;
  /**
   * Relays a job of queue `relayed` to the broker at `brokerUrl` through a
   * proxy (`target` gets the proxy's URL), makes the proxy deaf while the next
   * batch, three jobs of queue `later` (new to the target, so RabbitMQ declares
   * its queue first), is in flight, and expects `stop()` to end within its
   * bounds and give the batch back.
   */
  expectBoundedStopOnDeafBroker(brokerUrl: string, target: (url: string) => RelayTarget): Promise<void>;
  /**
   * Starts a relay whose broker never answers its connect (a proxy that moves
   * no bytes; `target` gets the proxy's URL), and expects `stop()` to end
   * within a few seconds: the connect gives up after `publishTimeoutMs`.
   */
  expectBoundedStopWhileConnecting(brokerUrl: string, target: (url: string) => RelayTarget): Promise<void>;
  /**
   * Starts the worker `worker` makes for the broker at `url` (a proxy to
   * `brokerUrl`) with a `greet` handler and a 1 s shutdown timeout, runs a
   * `greet` job of queue `q`, makes the proxy deaf, and expects `stop()` to
   * end within its bounds.
   */
  expectWorkerBoundedStopOnDeafBroker(
    brokerUrl: string,
    worker: (url: string, options: BrokerWorkerOptions<JobMap>) => NatsWorker | RabbitmqWorker,
  ): Promise<void>;
}

export function brokerTest(t: TestContext): BrokerTest {
  /** A proxy to the broker at `brokerUrl`, closed after the test. */
  const proxyTo = async (brokerUrl: string) => {
    const address = new URL(brokerUrl);
    const port = Number(address.port || (address.protocol === 'nats:' ? 4222 : 5672));
    const proxy = await startNetProxy({ host: address.hostname, port });
    t.defer(() => proxy.close());
    return proxy;
  };
  return {
    stream(prefix = 'relay') {
      const stream = uniqueStream(prefix);
      t.defer(() => deleteStream(stream));
      return stream;
    },
    rabbitmqPrefix(queues, prefix = 'skiplock_test', url = RABBITMQ_URL) {
      const name = uniquePrefix(prefix);
      t.defer(() =>
        deleteQueues(
          queues.map((queue) => rabbitmqQueueName(name, queue)),
          url,
        ),
      );
      return name;
    },
    relay(options) {
      const relay = createRelay(t.skiplock, { handleSignals: false, lingerMs: 20, ...options });
      relay.on('error', () => {});
      t.defer(() => relay.stop());
      return relay;
    },
    async started(worker) {
      worker.on('error', () => {});
      t.defer(() => worker.stop());
      await worker.start();
      return worker;
    },
    async expectBoundedStopOnDeafBroker(brokerUrl, target) {
      const proxy = await proxyTo(brokerUrl);
      const relay = this.relay({
        target: target(proxy.url(brokerUrl)),
        queues: ['relayed', 'later'],
        publishTimeoutMs: 1000,
        visibilityTimeoutMs: 60_000,
      });
      relay.start();
      const first = await t.skiplock.enqueue('a', {}, { queue: 'relayed' });
      await until(async () => (await t.jobCount('id = $1', [first.id])) === 0, 'the first job relayed');
      proxy.freeze();
      await t.skiplock.enqueueMany(
        Array.from({ length: 3 }, () => ({ kind: 'a', payload: {}, queue: 'later' })),
      );
      await until(async () => (await t.jobCount("status = 'running'")) === 3, 'a batch in flight');
      // Bounded by publishTimeoutMs for the batch and again for the connection's close.
      expect(await stopWithin(relay, 20_000)).toBe('stopped');
      expect(await t.jobCount("status = 'queued'")).toBe(3);
    },
    async expectBoundedStopWhileConnecting(brokerUrl, target) {
      const proxy = await proxyTo(brokerUrl);
      proxy.partition();
      const relay = this.relay({
        target: target(proxy.url(brokerUrl)),
        queues: ['relayed'],
        publishTimeoutMs: 1000,
        visibilityTimeoutMs: 60_000,
      });
      relay.start();
      await until(() => proxy.accepted > 0, 'the relay connecting');
      expect(await stopWithin(relay, 5_000)).toBe('stopped');
    },
    async expectWorkerBoundedStopOnDeafBroker(brokerUrl, makeWorker) {
      const proxy = await proxyTo(brokerUrl);
      const done: string[] = [];
      const worker = await this.started(
        makeWorker(proxy.url(brokerUrl), {
          queues: ['q'],
          handleSignals: false,
          shutdownTimeoutMs: 1000,
          handlers: { greet: (job: Job) => void done.push(job.id) },
        }),
      );
      const job = await t.skiplock.enqueue('greet', {}, { queue: 'q' });
      await until(() => done.length === 1, 'the job run');
      expect(done).toEqual([job.id]);
      proxy.freeze();
      expect(await stopWithin(worker, 20_000)).toBe('stopped');
    },
  };
}

/** 'stopped' when `service` stopped within `timeoutMs`, else 'still stopping'. */
function stopWithin(service: { stop(): Promise<void> }, timeoutMs: number): Promise<string> {
  return Promise.race([
    service.stop().then(() => 'stopped'),
    new Promise<string>((resolve) => setTimeout(resolve, timeoutMs, 'still stopping')),
  ]);
}

/** What an idempotent handler wrote: its effects (one per job) and every delivery it got. */
export interface EffectLedger {
  /** The environment a worker process (test/processes/effect-worker.ts) needs for the tables. */
  readonly env: Record<string, string>;
  /** Effects written (each job once at most). */
  effects(): Promise<number>;
  /** Deliveries the handler got, repeats included. */
  deliveries(): Promise<number>;
  /** The ids of the jobs with an effect, sorted. */
  effectIds(): Promise<string[]>;
  /** How many deliveries each of `ids` got (rolled-back ids must get none). */
  deliveriesOf(ids: readonly string[]): Promise<number>;
  /**
   * Starts a worker process on the broker of `brokerEnv`, and resolves once it
   * consumes; it SIGKILLs itself after its `killAfter`-th delivery (0: never).
   */
  startWorker(brokerEnv: Record<string, string>, killAfter?: number): Promise<ChildProcess>;
}

/** Makes the effect and delivery tables in the test's schema. */
export async function effectLedger(t: TestContext): Promise<EffectLedger> {
  const effects = tableIn(t.schema, 'relay_effects');
  const deliveries = tableIn(t.schema, 'relay_deliveries');
  await t.query(`CREATE TABLE ${effects} (job_id bigint PRIMARY KEY)`);
  await t.query(`CREATE TABLE ${deliveries} (job_id bigint NOT NULL, pid int NOT NULL)`);
  const count = async (table: string) =>
    (await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`))[0]!.n;
  const env = { EFFECTS_TABLE: effects, DELIVERIES_TABLE: deliveries };
  return {
    env,
    effects: () => count(effects),
    deliveries: () => count(deliveries),
    async effectIds() {
      const rows = await t.query<{ id: string }>(`SELECT job_id::text AS id FROM ${effects}`);
      return rows.map((row) => row.id).sort();
    },
    async deliveriesOf(ids) {
      const rows = await t.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${deliveries} WHERE job_id = ANY($1::bigint[])`,
        [ids],
      );
      return rows[0]!.n;
    },
    async startWorker(brokerEnv, killAfter = 0) {
      const child = killedAfterTest(
        t,
        forkScript('../processes/effect-worker.ts', {
          DATABASE_URL: t.url,
          SKIPLOCK_SCHEMA: t.schema,
          KILL_AFTER_EFFECTS: String(killAfter),
          ...env,
          ...brokerEnv,
        }),
      );
      await sent(child, 'ready');
      return child;
    },
  };
}
