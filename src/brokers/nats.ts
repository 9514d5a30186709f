/**
 * NATS JetStream for the relay (`skiplock/nats`): `natsTarget` publishes
 * relayed jobs to a stream, one subject per queue, with the job's message id
 * as `Nats-Msg-Id` (the stream's duplicate window drops a repeat); `natsWorker`
 * consumes them with the same handler definitions as `skiplock.worker`. The
 * clients, `@nats-io/transport-node` and `@nats-io/jetstream`, are optional
 * packages loaded when a target or worker connects.
 */
import { createHash } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type {
  Consumer,
  ConsumerMessages,
  JetStreamClient,
  JetStreamManager,
  JsMsg,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { ValidationError } from '../errors.js';
import type { JobMap } from '../job/job.js';
import { importOptional } from '../optional-dependency.js';
import { refuseUnknownOptions } from '../options.js';
import { brokerMessageId, decodeRelayedJob, encodeRelayedJob, type RelayedJob } from '../relay/message.js';
import type { RelayTarget } from '../relay/relay.js';
import type { Skiplock } from '../skiplock.js';
import {
  BrokerWorker,
  type BrokerWorkerOptions,
  FinishedMessages,
  MessageRefusedError,
  type Republish,
  settle,
  withinMs,
} from './broker-worker.js';

export type { BrokerWorkerEvents, BrokerWorkerOptions, RelayedJob } from './broker-worker.js';

/** Where relayed jobs go in NATS JetStream. */
export interface NatsStreamOptions {
  /** NATS server URL(s), e.g. `nats://127.0.0.1:4222`. */
  servers: string | string[];
  /** The stream's name; created when missing (work-queue retention, file storage). */
  stream: string;
  /** Subjects are `<subjectPrefix>.<queue>` (a queue's characters outside `A-Za-z0-9_-` escaped as `%XX`). @default the stream's name */
  subjectPrefix?: string;
  /**
   * The duplicate window of a stream this creates, in milliseconds: a message
   * id seen within it is dropped. Keep it longer than the relay's
   * `visibilityTimeoutMs`. @default 600000 (10 minutes)
   */
  duplicateWindowMs?: number;
}

type Nats = typeof import('@nats-io/transport-node');
type JetStreamModule = typeof import('@nats-io/jetstream');

async function loadClients(): Promise<{ nats: Nats; jetstream: JetStreamModule }> {
  const neededFor = 'skiplock/nats';
  // One after the other, so a missing client is named in a fixed order.
  const nats = await importOptional<Nats>('@nats-io/transport-node', {
    packageName: '@nats-io/transport-node',
    neededFor,
  });
  const jetstream = await importOptional<JetStreamModule>('@nats-io/jetstream', {
    packageName: '@nats-io/jetstream',
    neededFor,
  });
  return { nats, jetstream };
}

/** The subject of a queue's jobs. */
export function natsSubject(subjectPrefix: string, queue: string): string {
  const token = [...Buffer.from(queue, 'utf8')]
    .map((byte) => {
      const c = String.fromCharCode(byte);
      return /[A-Za-z0-9_-]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
    })
    .join('');
  return `${subjectPrefix}.${token}`;
}

/** The longest duplicate window whose nanoseconds are a safe integer. */
const MAX_WINDOW_MS = Math.floor(Number.MAX_SAFE_INTEGER / 1_000_000);

/** The options of {@link NatsStreamOptions}. */
const NATS_STREAM_KEYS = ['servers', 'stream', 'subjectPrefix', 'duplicateWindowMs'];

function checkStreamOptions(options: NatsStreamOptions, field: string): Required<NatsStreamOptions> {
  if (typeof options !== 'object' || options === null) throw new ValidationError(field, 'must be an object');
  const servers = options.servers;
  if (
    !(typeof servers === 'string' || (Array.isArray(servers) && servers.every((s) => typeof s === 'string')))
  )
    throw new ValidationError(`${field}.servers`, 'must be a URL or a list of URLs');
  if ((Array.isArray(servers) ? servers : [servers]).every((s) => s.trim() === ''))
    throw new ValidationError(`${field}.servers`, 'must name at least one server');
  if (typeof options.stream !== 'string' || !/^[A-Za-z0-9_-]+$/.test(options.stream))
    throw new ValidationError(`${field}.stream`, 'must be a stream name (A-Z, a-z, 0-9, _ and -)');
  const subjectPrefix = options.subjectPrefix ?? options.stream;
  if (typeof subjectPrefix !== 'string' || !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(subjectPrefix))
    throw new ValidationError(
      `${field}.subjectPrefix`,
      'must be dot-separated tokens of A-Z, a-z, 0-9, _ and -',
    );
  const duplicateWindowMs = options.duplicateWindowMs ?? 600_000;
  // The broker takes it in nanoseconds: at most about 104 days stays exact.
  if (!Number.isInteger(duplicateWindowMs) || duplicateWindowMs < 1000 || duplicateWindowMs > MAX_WINDOW_MS)
    throw new ValidationError(`${field}.duplicateWindowMs`, `must be an integer in 1000…${MAX_WINDOW_MS}`);
  return { servers, stream: options.stream, subjectPrefix, duplicateWindowMs };
}

/** Creates the stream when missing; an existing one is used as it is. */
async function ensureStream(
  jetstream: JetStreamModule,
  connection: NatsConnection,
  options: Required<NatsStreamOptions>,
): Promise<void> {
  const manager = await jetstream.jetstreamManager(connection);
  try {
    await manager.streams.info(options.stream);
    return;
  } catch (error) {
    if (!(error instanceof jetstream.JetStreamApiError) || error.status !== 404) throw error;
  }
  await manager.streams.add({
    name: options.stream,
    subjects: [`${options.subjectPrefix}.>`],
    retention: jetstream.RetentionPolicy.Workqueue,
    storage: jetstream.StorageType.File,
    duplicate_window: options.duplicateWindowMs * 1_000_000,
  });
}

/** JetStream's error code for a message larger than the stream's `max_msg_size`. */
const STREAM_MESSAGE_TOO_LARGE = 10054;

/**
 * Why NATS can never take a message of `body`, when `error` says so: the
 * client refused it (the message and its headers are more than the server's
 * `max_payload`; the client checks before it sends), or the stream did (more
 * than its `max_msg_size`). Undefined for any other error.
 */
function tooLarge(error: unknown, body: Uint8Array, connection: NatsConnection): string | undefined {
  if (!(error instanceof Error)) return undefined;
  if (error.message.includes('max_payload')) {
    const limit = connection.info?.max_payload;
    return `its message of ${body.length} bytes and its headers are more than the NATS server's max_payload${limit === undefined ? '' : ` (${limit} bytes)`}`;
  }
  if ((error as { code?: unknown }).code === STREAM_MESSAGE_TOO_LARGE)
    return `its message of ${body.length} bytes is more than the stream's max_msg_size (${error.message})`;
  return undefined;
}

/**
 * A relay target that publishes to a NATS JetStream stream and waits for the
 * stream's acknowledgement of each job. A job the stream reports as a
 * duplicate counts as acknowledged (it was published before).
 *
 * @example
 * createRelay(skiplock, { target: natsTarget({ servers: 'nats://127.0.0.1:4222', stream: 'jobs' }), queues: ['emails'] });
 *
 * @throws {ValidationError} naming the field (`natsTarget.stream`…).
 */
export function natsTarget(options: NatsStreamOptions): RelayTarget {
  const settings = checkStreamOptions(options, 'natsTarget');
  refuseUnknownOptions(options, 'natsTarget', NATS_STREAM_KEYS);
  let connection: NatsConnection | undefined;
  let client: import('@nats-io/jetstream').JetStreamClient | undefined;
  return {
    name: 'nats',
    async connect(timeoutMs?: number) {
      const { nats, jetstream } = await loadClients();
      // No async traces: they build two Error objects (and their stacks) per publish, a sixth of the relay's CPU.
      connection = await nats.connect({
        servers: settings.servers,
        maxReconnectAttempts: -1,
        noAsyncTraces: true,
        ...(timeoutMs !== undefined && { timeout: timeoutMs }),
      });
      try {
        await ensureStream(jetstream, connection, settings);
      } catch (error) {
        await connection.close().catch(() => {});
        connection = undefined;
        throw error;
      }
      client = jetstream.jetstream(connection);
    },
    async publish(jobs, timeoutMs) {
      const js = client;
      const open = connection;
      if (!js || !open) throw new Error('not connected');
      const bodies = jobs.map(encodeRelayedJob);
      // Sent back to back on one connection, so the stream stores them in this order.
      const acks = await Promise.allSettled(
        jobs.map((job, i) =>
          js.publish(natsSubject(settings.subjectPrefix, job.queue), bodies[i], {
            msgID: brokerMessageId(job),
            timeout: timeoutMs,
          }),
        ),
      );
      const acknowledged = new Set<string>();
      const refused = new Map<string, string>();
      acks.forEach((ack, i) => {
        const id = jobs[i]!.id;
        if (ack.status === 'fulfilled') acknowledged.add(id);
        else {
          const reason = tooLarge(ack.reason, bodies[i]!, open);
          if (reason) refused.set(id, reason);
        }
      });
      return { acknowledged, refused };
    },
    async close(timeoutMs) {
      const open = connection;
      connection = undefined;
      client = undefined;
      if (!open) return;
      // drain() waits for the server's answer, which a deaf connection never sends.
      await withinMs(
        open.drain().catch(() => {}),
        timeoutMs,
      );
      await open.close().catch(() => {});
    },
  };
}

/** Options of {@link natsWorker}. */
export interface NatsWorkerOptions<Jobs extends JobMap> extends BrokerWorkerOptions<Jobs>, NatsStreamOptions {
  /** How long the broker waits for a delivery's ack before redelivering it, in milliseconds; running handlers extend it. @default 30000 */
  ackWaitMs?: number;
}

/**
 * The durable consumer of one queue's subject, shared by every worker of that
 * queue: `skiplock_<hash of the subject>` (one consumer per subject, as a
 * work-queue stream wants).
 */
export function natsConsumerName(subject: string): string {
  return `skiplock_${createHash('sha256').update(subject).digest('hex').slice(0, 16)}`;
}

/** The options of {@link NatsWorkerOptions} beyond those every broker-side worker takes. */
const NATS_WORKER_KEYS = [...NATS_STREAM_KEYS, 'ackWaitMs'];

/**
 * How long one pull request waits at the broker for messages, in
 * milliseconds (the client's least). A stop waits for the open ones to end
 * this way rather than leaving them: the broker says when a request is over,
 * after the last message it sent for it.
 */
const PULL_EXPIRES_MS = 1000;

/**
 * How long a delivery waits here for a slot, in milliseconds, before it goes
 * back to the broker for another worker: more than {@link PULL_EXPIRES_MS},
 * so that this worker's pull request that brought it has ended.
 */
const PARKED_MS = 2 * PULL_EXPIRES_MS;

/** How long a pull loop pauses after a broker error, in milliseconds. */
const PULL_RETRY_MS = 1000;

/**
 * A broker-side worker on NATS JetStream: `start()`, `stop()`, events.
 *
 * Each queue's loop pulls only as many messages as there are free slots, and
 * pulls again when its request is over (filled, or after
 * {@link PULL_EXPIRES_MS} without messages): a busy worker holds no delivery
 * it cannot run, so other workers run them. The queues share the slots, so a
 * message may still arrive when none is free (another queue's took it): it
 * waits for one, its delivery kept alive as a running job's is, for
 * {@link PARKED_MS} at most, then goes back to the broker.
 */
export class NatsWorker extends BrokerWorker {
  readonly #stream: Required<NatsStreamOptions>;
  readonly #ackWaitMs: number;
  /** Pull loops waiting for a free slot: all are woken when one frees. */
  readonly #idleLoops: (() => void)[] = [];
  /** Deliveries waiting for a slot, oldest first: started one per freed slot. */
  readonly #parked: { start(): void; giveBack(): void }[] = [];
  /**
   * The deliveries of the jobs waiting for a slot or running here, by message id:
   * a redelivery of one (its ack wait ran out) takes the place of the delivery
   * it is acknowledged through, and is not run again.
   */
  readonly #current = new Map<string, { message: JsMsg }>();
  readonly #done = new FinishedMessages();
  /**
   * Deliveries that came in while stopping, given back (`nak`) once the pull
   * loops have ended: given back sooner, the broker may send one straight back
   * to this worker's own open pull request.
   */
  readonly #givenBack: JsMsg[] = [];
  #connection: NatsConnection | undefined;
  /** The pull requests open now, stopped (unsubscribed) only when a stop runs out of time. */
  readonly #pulls = new Set<ConsumerMessages>();
  readonly #loops: Promise<void>[] = [];
  /** Ends a pull loop's pause after an error, on stop. */
  readonly #stopped = new AbortController();

  /** Made by {@link natsWorker}. */
  constructor(skiplock: Skiplock, options: NatsWorkerOptions<JobMap>) {
    const stream = checkStreamOptions(options, 'natsWorker');
    const ackWaitMs = options.ackWaitMs ?? 30_000;
    if (!Number.isInteger(ackWaitMs) || ackWaitMs < 1000)
      throw new ValidationError('natsWorker.ackWaitMs', 'must be an integer ≥ 1000');
    super(skiplock, options, 'natsWorker', NATS_WORKER_KEYS, Math.floor(ackWaitMs / 3));
    this.#stream = stream;
    this.#ackWaitMs = ackWaitMs;
  }

  /** Connects, creates or checks the stream and the durable consumer of each queue, and consumes. */
  protected async connect(): Promise<void> {
    const { nats, jetstream } = await loadClients();
    const connection = await nats.connect({ servers: this.#stream.servers, maxReconnectAttempts: -1 });
    const client = jetstream.jetstream(connection);
    const consumers: Consumer[] = [];
    let manager: JetStreamManager;
    try {
      await ensureStream(jetstream, connection, this.#stream);
      manager = await jetstream.jetstreamManager(connection);
      for (const queue of this.settings.queues)
        consumers.push(await this.#consumer(jetstream, manager, client, queue));
    } catch (error) {
      await connection.close().catch(() => {});
      throw error;
    }
    this.#connection = connection;
    const republish = (job: RelayedJob) => this.#republish(client, connection, job);
    this.settings.queues.forEach((queue, i) => {
      // After an error, the stream and the consumer are set up again (someone may have deleted them).
      const setUp = async () => {
        await ensureStream(jetstream, connection, this.#stream);
        return this.#consumer(jetstream, manager, client, queue);
      };
      this.#loops.push(this.#pull(consumers[i]!, setUp, republish));
    });
  }

  /** The durable consumer of one queue, created when missing, or its ack wait raised as needed. */
  async #consumer(
    jetstream: JetStreamModule,
    manager: JetStreamManager,
    client: JetStreamClient,
    queue: string,
  ): Promise<Consumer> {
    const subject = natsSubject(this.#stream.subjectPrefix, queue);
    const name = natsConsumerName(subject);
    try {
      const info = await manager.consumers.info(this.#stream.stream, name);
      // The consumer is shared: its ack wait grows to the longest a worker asked
      // for, so that no worker's jobs are redelivered before its own ackWaitMs
      // (each renews its deliveries every third of its own).
      if ((info.config.ack_wait ?? 0) < this.#ackWaitMs * 1_000_000)
        await manager.consumers.update(this.#stream.stream, name, {
          ack_wait: this.#ackWaitMs * 1_000_000,
        });
    } catch (error) {
      if (!(error instanceof jetstream.JetStreamApiError) || error.status !== 404) throw error;
      await manager.consumers.add(this.#stream.stream, {
        durable_name: name,
        filter_subject: subject,
        ack_policy: jetstream.AckPolicy.Explicit,
        ack_wait: this.#ackWaitMs * 1_000_000,
        // Attempts are counted in the message and ended by the worker (dead letter), not by the broker.
        max_deliver: -1,
        max_ack_pending: Math.max(1000, this.settings.concurrency * 2),
      });
    }
    return client.consumers.get(this.#stream.stream, name);
  }

  async #republish(client: JetStreamClient, connection: NatsConnection, job: RelayedJob): Promise<void> {
    const body = encodeRelayedJob(job);
    try {
      await client.publish(natsSubject(this.#stream.subjectPrefix, job.queue), body, {
        msgID: brokerMessageId(job),
      });
    } catch (error) {
      const reason = tooLarge(error, body, connection);
      throw reason === undefined ? error : new MessageRefusedError(reason);
    }
  }

  /**
   * One queue's loop: a pull request for the free slots, its messages taken
   * in, again until stopped. After an error it pauses, then sets up its
   * consumer again before the next request.
   */
  async #pull(consumer: Consumer, setUp: () => Promise<Consumer>, republish: Republish): Promise<void> {
    let failed = false;
    while (!this.stopping) {
      const free = this.settings.concurrency - this.runner.activeCount - this.#parked.length;
      if (free <= 0) {
        await new Promise<void>((resolve) => this.#idleLoops.push(resolve));
        continue;
      }
      let messages: ConsumerMessages | undefined;
      try {
        if (failed) consumer = await setUp();
        failed = false;
        messages = await consumer.fetch({ max_messages: free, expires: PULL_EXPIRES_MS });
        this.#pulls.add(messages);
        for await (const message of messages) this.#take(message, republish);
      } catch (error) {
        if (this.stopping) break;
        failed = true;
        this.runner.report(error, 'consume');
        await delay(PULL_RETRY_MS, undefined, { signal: this.#stopped.signal }).catch(() => {});
      } finally {
        if (messages) this.#pulls.delete(messages);
      }
    }
  }

  /**
   * Runs one delivered message, or parks it until a slot frees, or gives it
   * back when stopping. Never waits: the pull request's other messages are
   * read at once, each kept alive from then on.
   */
  #take(message: JsMsg, republish: Republish): void {
    if (this.stopping) {
      this.#givenBack.push(message);
      return;
    }
    let job: RelayedJob;
    try {
      job = decodeRelayedJob(message.data);
    } catch (error) {
      // Not a skiplock job: kept out of the way, and reported.
      settle(() => message.term('not a relayed skiplock job'));
      this.runner.report(error, 'consume');
      return;
    }
    const messageId = brokerMessageId(job);
    if (this.#done.has(messageId)) {
      settle(() => message.ack());
      return;
    }
    const held = this.#current.get(messageId);
    if (held) {
      held.message = message;
      return;
    }
    const delivery = { message };
    this.#current.set(messageId, delivery);
    const run = () => {
      void this.runner
        .run(
          {
            job,
            ack: async () => {
              await delivery.message.ackAck();
              this.#done.add(messageId);
            },
            retry: (delayMs) => delivery.message.nak(delayMs),
            working: () => delivery.message.working(),
          },
          republish,
        )
        .finally(() => {
          this.#current.delete(messageId);
          this.#slotFreed();
        });
    };
    if (this.runner.activeCount < this.settings.concurrency) {
      run();
      return;
    }
    const beat = setInterval(() => settle(() => delivery.message.working()), Math.floor(this.#ackWaitMs / 3));
    const unpark = () => {
      clearInterval(beat);
      clearTimeout(expiry);
    };
    const parked = {
      start: () => {
        unpark();
        run();
      },
      giveBack: () => {
        unpark();
        this.#current.delete(messageId);
        this.#givenBack.push(delivery.message);
      },
    };
    // Still here after PARKED_MS: back to the broker, for a worker with a free slot. This
    // worker's own pull request of that queue has ended by then, and it pulls no more while busy.
    const expiry = setTimeout(() => {
      const at = this.#parked.indexOf(parked);
      if (at < 0) return;
      this.#parked.splice(at, 1);
      unpark();
      this.#current.delete(messageId);
      settle(() => delivery.message.nak());
    }, PARKED_MS);
    this.#parked.push(parked);
  }

  /** A job ended: the oldest parked delivery takes its slot, else every waiting pull loop looks again. */
  #slotFreed(): void {
    if (!this.stopping) {
      const parked = this.#parked.shift();
      if (parked) {
        parked.start();
        return;
      }
    }
    for (const wake of this.#idleLoops.splice(0)) wake();
  }

  protected async disconnect(): Promise<void> {
    this.#stopped.abort();
    // Parked deliveries go to the ones given back; pull loops stop waiting for a slot.
    for (const parked of this.#parked.splice(0)) parked.giveBack();
    for (const wake of this.#idleLoops.splice(0)) wake();
    // An open pull request ends at the broker within PULL_EXPIRES_MS; what it
    // brings meanwhile is given back. Unsubscribing sooner would drop a message
    // the broker was sending right then, back only after its ack wait. A broker
    // that stopped answering ends none of these steps: each is waited for up to
    // shutdownTimeoutMs, then the requests are dropped and so is the connection.
    const pullsEnded = withinMs(Promise.allSettled(this.#loops), this.settings.shutdownTimeoutMs).then(() => {
      for (const pull of this.#pulls) pull.stop();
      for (const message of this.#givenBack.splice(0)) settle(() => message.nak());
    });
    await Promise.all([pullsEnded, this.runner.drain(this.settings.shutdownTimeoutMs)]);
    const connection = this.#connection;
    if (connection) {
      await withinMs(
        connection.drain().catch(() => {}),
        this.settings.shutdownTimeoutMs,
      );
      await connection.close().catch(() => {});
    }
  }
}

/**
 * Makes a broker-side worker that consumes relayed jobs from NATS JetStream
 * with the same handler definitions as `skiplock.worker` (kinds, typed
 * payloads, `maxAttempts`, `backoff`, `timeoutMs`, AbortSignal,
 * `PermanentError`, `SnoozeError`); call `start()`.
 *
 * @example
 * const worker = natsWorker(skiplock, {
 *   servers: 'nats://127.0.0.1:4222', stream: 'jobs', queues: ['emails'],
 *   handlers: { send_email: async (job) => { … } },
 * });
 * await worker.start();
 *
 * @throws {ValidationError} naming the field (`natsWorker.handlers.send_email`…).
 */
export function natsWorker<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  options: NatsWorkerOptions<NoInfer<Jobs>>,
): NatsWorker {
  return new NatsWorker(skiplock as unknown as Skiplock, options as unknown as NatsWorkerOptions<JobMap>);
}
