/**
 * RabbitMQ for the relay (`skiplock/rabbitmq`): `rabbitmqTarget` publishes
 * relayed jobs to a durable quorum queue per skiplock queue, as persistent
 * messages with publisher confirms and the job's message id as `messageId`;
 * `rabbitmqWorker` consumes them with the same handler definitions as
 * `skiplock.worker`. A retry waits out its delay in a companion queue whose
 * messages expire back into the job's queue. The client, `amqplib`, is an
 * optional package loaded when a target or worker connects.
 */
import type { ChannelModel, ConfirmChannel, ConsumeMessage } from 'amqplib';
import { ValidationError } from '../errors.js';
import { describeFailure } from '../job/failure.js';
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
  settle,
  withinMs,
} from './broker-worker.js';

export type { BrokerWorkerEvents, BrokerWorkerOptions, RelayedJob } from './broker-worker.js';

/** Where relayed jobs go in RabbitMQ. */
export interface RabbitmqQueueOptions {
  /** The AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672`. */
  url: string;
  /**
   * Prefix of the RabbitMQ queues: the jobs of skiplock queue `emails` go to
   * the quorum queue `<queue>.emails` (created when missing), and its retries
   * wait in `<queue>.emails.delay`. @default 'skiplock'
   */
  queue?: string;
}

type Amqp = typeof import('amqplib');

async function loadClient(): Promise<Amqp> {
  const module = await importOptional<Amqp & { default?: Amqp }>('amqplib', {
    packageName: 'amqplib',
    neededFor: 'skiplock/rabbitmq',
  });
  return module.default ?? module;
}

function checkQueueOptions(options: RabbitmqQueueOptions, field: string): Required<RabbitmqQueueOptions> {
  if (typeof options !== 'object' || options === null) throw new ValidationError(field, 'must be an object');
  if (typeof options.url !== 'string' || !/^amqps?:\/\//.test(options.url))
    throw new ValidationError(`${field}.url`, 'must be an amqp:// or amqps:// URL');
  const queue = options.queue ?? 'skiplock';
  if (typeof queue !== 'string' || queue === '' || Buffer.byteLength(queue) > 100)
    throw new ValidationError(`${field}.queue`, 'must be a name of 1…100 bytes');
  // The queues are `<queue>.<skiplock queue>`; RabbitMQ refuses to declare names starting `amq.`.
  if (queue === 'amq' || queue.startsWith('amq.'))
    throw new ValidationError(
      `${field}.queue`,
      'must not make names starting with "amq." (RabbitMQ reserves them)',
    );
  return { url: options.url, queue };
}

/** The RabbitMQ queue of a skiplock queue's jobs. */
export function rabbitmqQueueName(prefix: string, queue: string): string {
  return `${prefix}.${queue}`;
}

/** The longest queue name AMQP carries, in bytes (a short string). */
const MAX_QUEUE_NAME_BYTES = 255;

/**
 * Why RabbitMQ can never hold the queues of skiplock queue `queue` (with its
 * delay queue, a name longer than AMQP allows), or undefined.
 */
function queueNameTooLong(prefix: string, queue: string): string | undefined {
  const bytes = Buffer.byteLength(`${rabbitmqQueueName(prefix, queue)}.delay`);
  if (bytes <= MAX_QUEUE_NAME_BYTES) return undefined;
  return `its queue's RabbitMQ name with ".delay" is ${bytes} bytes, more than the ${MAX_QUEUE_NAME_BYTES} AMQP allows`;
}

/** Declares the quorum queue of `name` and its delay queue, which expires messages back into it. */
async function assertQueues(channel: ConfirmChannel, name: string): Promise<void> {
  await channel.assertQueue(name, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  await channel.assertQueue(`${name}.delay`, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': name },
  });
}

/**
 * The broker's `max_message_size` in bytes, when `error` is the channel error
 * of a message larger than that (406 PRECONDITION_FAILED). The broker tells it
 * only that way: a message too large closes the channel it came on.
 */
function maxMessageSizeOf(error: unknown): number | undefined {
  // "configured max size" below the broker's ceiling of 512 MiB, "max size" at it.
  const match = /message size \d+ is larger than (?:configured )?max size (\d+)/.exec(
    error instanceof Error ? error.message : '',
  );
  return match ? Number(match[1]) : undefined;
}

/** Why the broker can never take a message of `body`, when it is larger than `maxBytes` (once known). */
function tooLarge(body: Uint8Array, maxBytes: number | undefined): string | undefined {
  if (maxBytes === undefined || body.length <= maxBytes) return undefined;
  return `its message of ${body.length} bytes is more than the RabbitMQ server's max_message_size (${maxBytes} bytes)`;
}

/** Publishes one message of `job`, encoded as `body`, and resolves on the broker's confirm. */
function send(
  channel: ConfirmChannel,
  queue: string,
  job: RelayedJob,
  body: Uint8Array,
  expirationMs?: number,
): Promise<void> {
  return new Promise((resolve, reject) => {
    channel.sendToQueue(
      queue,
      Buffer.from(body.buffer, body.byteOffset, body.byteLength),
      {
        persistent: true,
        messageId: brokerMessageId(job),
        contentType: 'application/json',
        type: job.kind,
        ...(expirationMs !== undefined && { expiration: String(Math.max(0, Math.round(expirationMs))) }),
      },
      (error: unknown) => (error ? reject(error) : resolve()),
    );
  });
}

/** A worker's connection: its consuming channel, and the channel it publishes on (while open or opening). */
interface Connection {
  model: ChannelModel;
  channel: ConfirmChannel;
  publisher?: Promise<ConfirmChannel> | undefined;
}

/** How long opening a connection and its channel may take when the caller gives no bound, in milliseconds. */
const OPEN_TIMEOUT_MS = 10_000;

/**
 * A connection with one confirm channel; errors mark it broken instead of
 * crashing the process. Rejects after `timeoutMs` milliseconds (a broker that
 * accepts TCP and never answers), dropping what was opened.
 */
async function open(
  amqp: Amqp,
  url: string,
  timeoutMs = OPEN_TIMEOUT_MS,
): Promise<{ model: ChannelModel; channel: ConfirmChannel }> {
  const opening = (async () => {
    // The socket's timeout bounds the TCP connect and the AMQP handshake.
    const model = await amqp.connect(url, { timeout: timeoutMs });
    model.on('error', () => {});
    try {
      const channel = await model.createConfirmChannel();
      channel.on('error', () => {});
      return { model, channel };
    } catch (error) {
      await model.close().catch(() => {});
      throw error;
    }
  })();
  const opened = await withinMs(opening, timeoutMs);
  if (opened !== 'late') return opened;
  // Opened after all, too late: closed (within the same bound) so it does not linger.
  void opening.then(
    (late) => closeWithin(late.model, timeoutMs),
    () => {},
  );
  throw new Error(`no answer from the broker within ${timeoutMs} ms`);
}

/**
 * A relay target that publishes to RabbitMQ quorum queues (one per skiplock
 * queue) with publisher confirms, as persistent messages whose `messageId` is
 * the job's message id: consumers deduplicate by it.
 *
 * @example
 * createRelay(skiplock, { target: rabbitmqTarget({ url: 'amqp://guest:guest@127.0.0.1:5672' }), queues: ['emails'] });
 *
 * @throws {ValidationError} naming the field (`rabbitmqTarget.url`…).
 */
export function rabbitmqTarget(options: RabbitmqQueueOptions): RelayTarget {
  const settings = checkQueueOptions(options, 'rabbitmqTarget');
  refuseUnknownOptions(options, 'rabbitmqTarget', RABBITMQ_WORKER_KEYS);
  let connection: { model: ChannelModel; channel: ConfirmChannel } | undefined;
  /** Set when the broker closed the connection or the channel (a restart, a dropped socket). */
  let lost: Error | undefined;
  /**
   * The broker's max_message_size, learned when a message larger than it
   * closed the channel; forgotten when the broker closes the connection.
   */
  let maxMessageBytes: number | undefined;
  const declared = new Set<string>();
  return {
    name: 'rabbitmq',
    async connect(timeoutMs?: number) {
      const opened = await open(await loadClient(), settings.url, timeoutMs);
      lost = undefined;
      const onClose = (error?: unknown) => {
        if (connection !== opened) return;
        lost = new Error(`the broker closed the connection${error ? `: ${describeFailure(error)}` : ''}`, {
          cause: error,
        });
      };
      opened.model.on('close', (error?: unknown) => {
        // The broker closed the whole connection (a restart, say): its limit may have changed since.
        if (connection === opened && error) maxMessageBytes = undefined;
        onClose(error);
      });
      opened.channel.on('close', onClose);
      opened.channel.on('error', (error: unknown) => {
        maxMessageBytes = maxMessageSizeOf(error) ?? maxMessageBytes;
      });
      connection = opened;
      declared.clear();
    },
    async publish(jobs, timeoutMs) {
      const channel = connection?.channel;
      if (!channel) throw new Error('not connected');
      // A closed channel refuses every message without a word: the relay must reconnect.
      if (lost) throw lost;
      // One deadline for the queues' declaration and the confirms: a broker that stops answering holds neither up.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), timeoutMs);
      });
      // A queue name the broker cannot hold, or a message larger than it takes, would close the
      // channel, and every publish with it.
      const refused = new Map<string, string>();
      const bodies = new Map<string, Uint8Array>();
      for (const job of jobs) {
        const body = encodeRelayedJob(job);
        const reason = queueNameTooLong(settings.queue, job.queue) ?? tooLarge(body, maxMessageBytes);
        if (reason) refused.set(job.id, reason);
        else bodies.set(job.id, body);
      }
      const sent = refused.size === 0 ? jobs : jobs.filter((job) => !refused.has(job.id));
      try {
        for (const job of sent) {
          const name = rabbitmqQueueName(settings.queue, job.queue);
          if (declared.has(name)) continue;
          const declaring = assertQueues(channel, name);
          declaring.catch(() => {});
          if ((await Promise.race([declaring, late])) === 'late') return { acknowledged: new Set(), refused };
          declared.add(name);
        }
        const confirms = sent.map((job) =>
          Promise.race([
            send(channel, rabbitmqQueueName(settings.queue, job.queue), job, bodies.get(job.id)!),
            late,
          ]).then(
            (result) => result !== 'late',
            () => false,
          ),
        );
        const confirmed = await Promise.all(confirms);
        if (lost && !confirmed.some(Boolean)) throw lost;
        return { acknowledged: new Set(sent.filter((_, i) => confirmed[i]).map((job) => job.id)), refused };
      } finally {
        clearTimeout(timer);
      }
    },
    async close(timeoutMs) {
      const closing = connection;
      connection = undefined;
      if (closing) await closeWithin(closing.model, timeoutMs);
    },
  };
}

/**
 * Closes an AMQP connection, waiting at most `timeoutMs` for the broker's
 * close-ok (which a broker that stopped answering never sends), then destroys
 * its socket.
 */
async function closeWithin(model: { close(): Promise<void> }, timeoutMs: number): Promise<void> {
  const closed = await withinMs(
    model.close().catch(() => {}),
    timeoutMs,
  );
  if (closed === 'late') {
    (model as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
  }
}

/** Options of {@link rabbitmqWorker}. */
export interface RabbitmqWorkerOptions<Jobs extends JobMap>
  extends BrokerWorkerOptions<Jobs>,
    RabbitmqQueueOptions {}

/** The options of {@link RabbitmqQueueOptions}: a target's, and a worker's beyond those every broker-side worker takes. */
const RABBITMQ_WORKER_KEYS = ['url', 'queue'];

/** First pause, in milliseconds, before a worker connects again after losing its connection; doubled each failure. */
const RECONNECT_FIRST_MS = 500;

/** Longest pause, in milliseconds, between a worker's attempts to connect again. */
const RECONNECT_MAX_MS = 10_000;

/** A delivery and the connection it came on (acknowledged on that connection's consuming channel only). */
interface Held {
  message: ConsumeMessage;
  /**
   * The connection it came on: acknowledged on its consuming channel, its
   * job's next message published on its publishing channel.
   */
  connection: Connection;
}

/**
 * A broker-side worker on RabbitMQ: `start()`, `stop()`, events. When the
 * broker closes its connection (a restart, a dropped socket) it reports an
 * `error` (source `consume`) and connects again by itself, with a pause that
 * doubles from 0.5 s up to 10 s, until it is stopped.
 */
export class RabbitmqWorker extends BrokerWorker {
  readonly #queues: Required<RabbitmqQueueOptions>;
  readonly #done = new FinishedMessages();
  /**
   * The deliveries running or waiting for a slot here, by message id. When the
   * connection was lost under one, the broker delivers it again on the new
   * connection; that delivery takes its place, and the attempt's outcome is
   * acknowledged on it.
   */
  readonly #current = new Map<string, Held>();
  /** Deliveries waiting for a free slot. */
  readonly #waiting: (() => void)[] = [];
  #connection: Connection | undefined;
  /**
   * The broker's max_message_size, learned when a message larger than it
   * closed the publishing channel; forgotten when the broker closes the connection.
   */
  #maxMessageBytes: number | undefined;
  #consumerTags: string[] = [];
  #reconnectTimer: NodeJS.Timeout | undefined;

  /** Made by {@link rabbitmqWorker}. */
  constructor(skiplock: Skiplock, options: RabbitmqWorkerOptions<JobMap>) {
    const queues = checkQueueOptions(options, 'rabbitmqWorker');
    if (Array.isArray(options.queues))
      for (const [i, queue] of options.queues.entries()) {
        const reason = typeof queue === 'string' && queueNameTooLong(queues.queue, queue);
        if (reason) throw new ValidationError(`rabbitmqWorker.queues[${i}]`, `cannot be consumed: ${reason}`);
      }
    // RabbitMQ has no ack deadline to extend (quorum queues redeliver when the connection drops).
    super(skiplock, options, 'rabbitmqWorker', RABBITMQ_WORKER_KEYS, 60_000);
    this.#queues = queues;
  }

  /**
   * Connects, opens the channel retries and snoozes are published on, declares
   * the queues and consumes (`concurrency` unacknowledged deliveries at most).
   */
  protected async connect(): Promise<void> {
    const connection: Connection = await open(await loadClient(), this.#queues.url);
    const { channel } = connection;
    connection.model.on('close', (error?: unknown) => {
      // The broker closed the connection (a restart, say; our own closes carry no error): its limit
      // may have changed since. The channels closed first, so #lost has let go of it already.
      if (error) this.#maxMessageBytes = undefined;
    });
    const tags: string[] = [];
    try {
      await this.#openPublisher(connection);
      await channel.prefetch(this.settings.concurrency);
      for (const queue of this.settings.queues) {
        const name = rabbitmqQueueName(this.#queues.queue, queue);
        await assertQueues(channel, name);
        const { consumerTag } = await channel.consume(name, (message) => {
          if (message) this.#deliver(connection, message);
        });
        tags.push(consumerTag);
      }
    } catch (error) {
      await connection.model.close().catch(() => {});
      throw error;
    }
    const lost = (error?: unknown) => this.#lost(connection, error);
    connection.model.on('close', lost);
    channel.on('close', lost);
    this.#connection = connection;
    this.#consumerTags = tags;
  }

  /**
   * Opens `connection`'s publishing channel. It is apart from the consuming
   * one because a message larger than the broker takes closes the channel it
   * came on: the deliveries held, on the other, stay acknowledgeable. The
   * broker says its limit in that close, learned here before the publish fails.
   */
  #openPublisher(connection: Connection): Promise<ConfirmChannel> {
    const opening = connection.model.createConfirmChannel().then((publisher) => {
      publisher.on('error', (error: unknown) => {
        this.#maxMessageBytes = maxMessageSizeOf(error) ?? this.#maxMessageBytes;
      });
      publisher.on('close', () => {
        if (connection.publisher === opening) connection.publisher = undefined;
      });
      return publisher;
    });
    connection.publisher = opening;
    opening.catch(() => {
      if (connection.publisher === opening) connection.publisher = undefined;
    });
    return opening;
  }

  /**
   * Publishes the message of `job`, encoded as `body`, on `connection`'s
   * publishing channel (opened again after a message too large closed it):
   * into its queue, or its delay queue for `delayMs`.
   *
   * @throws {MessageRefusedError} when the message is larger than the broker's max_message_size.
   */
  async #publish(
    connection: Connection,
    queueName: string,
    job: RelayedJob,
    body: Uint8Array,
    delayMs: number,
  ): Promise<void> {
    const refusal = () => {
      const reason = tooLarge(body, this.#maxMessageBytes);
      return reason === undefined ? undefined : new MessageRefusedError(reason);
    };
    const known = refusal();
    if (known) throw known;
    // A broker that stopped answering holds neither the channel's opening nor the confirm for
    // longer than shutdownTimeoutMs, so that a stop waiting for this attempt stays bounded.
    const boundMs = this.settings.shutdownTimeoutMs;
    const within = async <T>(promise: Promise<T>, what: string): Promise<T> => {
      promise.catch(() => {});
      const result = await withinMs(promise, boundMs);
      if (result === 'late')
        throw new Error(`no ${what} from the broker within ${boundMs} ms (shutdownTimeoutMs)`);
      return result;
    };
    for (let tries = 1; ; tries++) {
      const opening = connection.publisher ?? this.#openPublisher(connection);
      try {
        const publisher = await within(opening, 'channel');
        await within(
          delayMs > 0
            ? send(publisher, `${queueName}.delay`, job, body, delayMs)
            : send(publisher, queueName, job, body),
          'confirm',
        );
        return;
      } catch (error) {
        const refused = refusal();
        if (refused) throw refused;
        // Another job's message too large closed the channel under this one, which the broker
        // may have stored or not: sent again, under the same message id, on a channel opened
        // again (a connection gone fails that open). Handed back instead, the delivery would
        // come again as the previous message, which consumers could not tell from this one.
        if (tries >= 2 || connection.publisher === opening) throw error;
      }
    }
  }

  /** The broker closed `connection` (or its channel): report it and connect again, unless stopping. */
  #lost(connection: { model: ChannelModel }, error?: unknown): void {
    if (this.#connection !== connection || this.stopping) return;
    this.#connection = undefined;
    this.#consumerTags = [];
    void connection.model.close().catch(() => {});
    this.runner.report(
      new Error(
        `the broker closed the connection${error ? `: ${describeFailure(error)}` : ''}; connecting again`,
        {
          cause: error,
        },
      ),
      'consume',
    );
    this.#reconnectAfter(RECONNECT_FIRST_MS);
  }

  #reconnectAfter(delayMs: number): void {
    this.#reconnectTimer = setTimeout(async () => {
      this.#reconnectTimer = undefined;
      if (this.stopping) return;
      try {
        await this.connect();
        // Stopped while connecting: the stop saw no connection to close.
        if (this.stopping) await closeWithin(this.#connection!.model, this.settings.shutdownTimeoutMs);
      } catch (error) {
        this.runner.report(error, 'consume');
        if (!this.stopping) this.#reconnectAfter(Math.min(delayMs * 2, RECONNECT_MAX_MS));
      }
    }, delayMs);
  }

  #deliver(connection: Connection, message: ConsumeMessage): void {
    const { channel } = connection;
    if (this.stopping) {
      settle(() => channel.nack(message, false, true));
      return;
    }
    let job: RelayedJob;
    try {
      job = decodeRelayedJob(message.content);
    } catch (error) {
      // Not a skiplock job: dropped (dead-lettered where the queue has a policy for it), and reported.
      settle(() => channel.nack(message, false, false));
      this.runner.report(error, 'consume');
      return;
    }
    const messageId = brokerMessageId(job);
    if (this.#done.has(messageId)) {
      settle(() => channel.ack(message));
      return;
    }
    const held = this.#current.get(messageId);
    if (held) {
      // The same job delivered again while it runs here: on this channel, a copy
      // published twice (a relay killed before it removed its batch), dropped;
      // after a lost connection, the broker's redelivery, which takes the place
      // of the delivery the old channel can no longer acknowledge.
      if (held.connection === connection) settle(() => channel.ack(message));
      else this.#current.set(messageId, { message, connection });
      return;
    }
    this.#current.set(messageId, { message, connection });
    const name = rabbitmqQueueName(this.#queues.queue, job.queue);
    // Each reads the delivery when the attempt ends: it may have been delivered again since.
    const delivery = () => this.#current.get(messageId) ?? { message, connection };
    const republish = (next: RelayedJob) =>
      this.#publish(
        delivery().connection,
        name,
        next,
        encodeRelayedJob(next),
        next.notBefore === undefined ? 0 : Date.parse(next.notBefore) - Date.now(),
      );
    const run = () =>
      this.runner
        .run(
          {
            job,
            ack: () => {
              this.#done.add(messageId);
              const { connection, message } = delivery();
              settle(() => connection.channel.ack(message));
            },
            retry: async (delayMs) => {
              const { connection, message } = delivery();
              if (delayMs > 0) {
                try {
                  await this.#publish(connection, name, job, message.content, delayMs);
                  settle(() => connection.channel.ack(message));
                  return;
                } catch {}
              }
              settle(() => connection.channel.nack(message, false, true));
            },
            working: () => {},
          },
          republish,
        )
        .finally(() => {
          this.#current.delete(messageId);
          this.#waiting.shift()?.();
        });
    // The prefetch is per queue's consumer (quorum queues have no channel-wide one): the slots are shared here.
    const start = () => {
      if (this.stopping) {
        const { connection, message } = delivery();
        this.#current.delete(messageId);
        settle(() => connection.channel.nack(message, false, true));
      } else void run();
    };
    if (this.runner.activeCount < this.settings.concurrency) start();
    else this.#waiting.push(start);
  }

  protected async disconnect(): Promise<void> {
    clearTimeout(this.#reconnectTimer);
    const connection = this.#connection;
    // Each broker round trip is bounded: a broker that stopped answering never holds the stop up.
    for (const tag of this.#consumerTags) {
      await withinMs(
        connection?.channel.cancel(tag).catch(() => {}) ?? Promise.resolve(),
        this.settings.shutdownTimeoutMs,
      );
    }
    // Deliveries still waiting for a slot go back to the broker.
    for (const start of this.#waiting.splice(0)) start();
    await this.runner.drain(this.settings.shutdownTimeoutMs);
    if (connection) await closeWithin(connection.model, this.settings.shutdownTimeoutMs);
  }
}

/**
 * Makes a broker-side worker that consumes relayed jobs from RabbitMQ with the
 * same handler definitions as `skiplock.worker` (kinds, typed payloads,
 * `maxAttempts`, `backoff`, `timeoutMs`, AbortSignal, `PermanentError`,
 * `SnoozeError`); call `start()`.
 *
 * @example
 * const worker = rabbitmqWorker(skiplock, {
 *   url: 'amqp://guest:guest@127.0.0.1:5672', queues: ['emails'],
 *   handlers: { send_email: async (job) => { … } },
 * });
 * await worker.start();
 *
 * @throws {ValidationError} naming the field (`rabbitmqWorker.handlers.send_email`…).
 */
export function rabbitmqWorker<Jobs extends JobMap>(
  skiplock: Skiplock<Jobs>,
  options: RabbitmqWorkerOptions<NoInfer<Jobs>>,
): RabbitmqWorker {
  return new RabbitmqWorker(
    skiplock as unknown as Skiplock,
    options as unknown as RabbitmqWorkerOptions<JobMap>,
  );
}
