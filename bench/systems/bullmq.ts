/**
 * BullMQ 5/6 against the machine's Redis (127.0.0.1:6379), with the settings
 * its docs give for throughput: finished jobs removed at once
 * (`removeOnComplete`), `concurrency` in one Worker, bulk adds with `addBulk`.
 */
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import { Queue, Worker } from 'bullmq';
import type { BenchPayload, BenchSystem, SystemClient, Target } from './system.js';

const require = createRequire(import.meta.url);
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

function connection() {
  const url = new URL(REDIS_URL);
  return { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
}

export const bullmqSystem: BenchSystem = {
  name: 'bullmq',
  postgres: false,
  settings: 'Redis 127.0.0.1:6379, removeOnComplete true, one Worker with `concurrency`',

  async available() {
    try {
      // bullmq 6 loads its Redis client, an optional peer dependency, only when a queue is made.
      createRequire(require.resolve('bullmq')).resolve('ioredis');
    } catch {
      console.error(
        'bullmq: its optional peer dependency ioredis is not installed (npm i -D ioredis, or NODE_PATH)',
      );
      return false;
    }
    const url = new URL(REDIS_URL);
    return new Promise<boolean>((resolve) => {
      const socket = connect({ host: url.hostname, port: Number(url.port || 6379) });
      const done = (ok: boolean) => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(1000, () => done(false));
      socket.on('error', () => done(false));
      socket.on('connect', () => socket.write('PING\r\n'));
      socket.on('data', (data) => done(data.toString().startsWith('+PONG')));
    });
  },

  async create(serverUrl, namespace) {
    return { system: 'bullmq', databaseUrl: serverUrl, namespace };
  },

  async attach(target: Target): Promise<SystemClient> {
    const queue = new Queue<BenchPayload>(target.namespace, {
      connection: connection(),
      defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
    });
    return {
      async enqueueOne(payload) {
        await queue.add('noop', payload);
      },
      async enqueueMany(payloads) {
        await queue.addBulk(payloads.map((data) => ({ name: 'noop', data })));
      },
      async startWorker(spec) {
        const worker = new Worker<BenchPayload>(
          target.namespace,
          async (job) => {
            await spec.handler(job.data);
          },
          {
            connection: connection(),
            concurrency: spec.concurrency,
          },
        );
        worker.on('error', (error) => console.error(`bullmq: ${error.message}`));
        await worker.waitUntilReady();
        return { stop: () => worker.close() };
      },
      async purge() {
        await queue.obliterate({ force: true });
      },
      async remaining() {
        const counts = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized');
        return Object.values(counts).reduce((a, b) => a + b, 0);
      },
      tableStats: async () => undefined,
      close: () => queue.close(),
    };
  },

  async destroy(target) {
    const queue = new Queue(target.namespace, { connection: connection() });
    await queue.obliterate({ force: true });
    await queue.close();
  },
};
