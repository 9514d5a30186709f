/**
 * A worker process for the chaos scenarios, run by the parent test with
 * `node --import tsx` (child_process.fork). Its configuration comes in the
 * `CHAOS_CONFIG` environment variable; it reports what its worker does over
 * IPC so the parent waits on events, never on sleeps.
 *
 * Handlers (by kind):
 * - `effect`: the idempotent effect: one row per job in `chaos_effects`
 *   (deliveries counted) and one row per delivery in `chaos_deliveries`.
 * - `block`: records the delivery, reports `started`, then waits for the
 *   parent's `finish` message (or, when `payload.cooperative`, for its signal).
 * - `poison`: kills its own process with SIGKILL, every time.
 * - each of `config.sleepKinds`: records the delivery with its start time,
 *   then sleeps `payload.ms`, honouring the signal when `payload.cooperative`.
 * - `txn_effect` (transactional): inserts (job id, attempt, pid) into
 *   `chaos_txn_effects` on the job's transaction, which has no unique key: a
 *   second commit of a job's effect would show as a second row.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type Job, PermanentError, Skiplock, type TransactionalHandlerContext } from '../../../src/index.js';
import { LISTEN, STOP, SWEEP, WARNING } from '../../support/events.js';
import { tableIn } from '../../support/sql.js';
import type { ChildMessage, ParentMessage, SleepPayload, WorkerProcessConfig } from './protocol.js';

const config = JSON.parse(process.env.CHAOS_CONFIG ?? '{}') as WorkerProcessConfig;

function send(message: ChildMessage): void {
  if (process.connected) process.send?.(message);
}

const pool = new pg.Pool({
  connectionString: config.url,
  application_name: config.appName,
  max: config.concurrency + 4,
});
pool.on('error', () => {});
const effects = new pg.Pool({
  connectionString: config.url,
  application_name: `${config.appName}-effects`,
  max: config.concurrency,
});
effects.on('error', () => {});

const finishers = new Map<string, (outcome: 'ok' | 'permanent') => void>();
process.on('message', (message: ParentMessage) => {
  if (message.type === 'finish') {
    const finish = finishers.get(message.id);
    if (finish) finish(message.outcome);
    else send({ type: 'finish:unknown', id: message.id });
  }
});

const effectsTable = tableIn(config.schema, 'chaos_effects');
const txnEffectsTable = tableIn(config.schema, 'chaos_txn_effects');
const deliveriesTable = tableIn(config.schema, 'chaos_deliveries');

/** `startedAt`: when the handler started (epoch ms), for scenarios that check start times. */
async function recordDelivery(jobId: string, attempt: number, startedAt?: number): Promise<void> {
  await effects.query(
    `WITH effect AS (
       INSERT INTO ${effectsTable} AS e (job_id, deliveries) VALUES ($1, 1)
       ON CONFLICT (job_id) DO UPDATE SET deliveries = e.deliveries + 1
     )
     INSERT INTO ${deliveriesTable} (job_id, attempt, pid, started_at)
     VALUES ($1, $2, $3, to_timestamp($4::float8 / 1000))`,
    [jobId, attempt, process.pid, startedAt ?? null],
  );
}

type Jobs = {
  effect: Record<string, unknown>;
  block: { cooperative?: boolean };
  poison: Record<string, never>;
  txn_effect: Record<string, unknown>;
};

/** The handler of the sleeping kinds; one that ignores its signal sleeps on after a cancel. */
async function sleeper(job: Job, { signal }: { signal: AbortSignal }): Promise<void> {
  const startedAt = Date.now();
  await recordDelivery(job.id, job.attempts, startedAt);
  const { ms, cooperative } = job.payload as SleepPayload;
  await sleep(ms, undefined, cooperative ? { signal } : {});
}

const skiplock = new Skiplock<Jobs>({ pool, schema: config.schema });
const worker = skiplock.worker({
  queues: config.queues,
  concurrency: config.concurrency,
  pollIntervalMs: config.pollIntervalMs,
  visibilityTimeoutMs: config.visibilityTimeoutMs,
  ...(config.heartbeatIntervalMs === undefined ? {} : { heartbeatIntervalMs: config.heartbeatIntervalMs }),
  sweepIntervalMs: config.sweepIntervalMs,
  shutdownTimeoutMs: config.shutdownTimeoutMs,
  ...(config.statementTimeoutMs === undefined ? {} : { statementTimeoutMs: config.statementTimeoutMs }),
  ...(config.listenProbeIntervalMs === undefined
    ? {}
    : { listenProbeIntervalMs: config.listenProbeIntervalMs }),
  onSuccess: config.onSuccess,
  handleSignals: config.handleSignals,
  handlers: {
    effect: async (job) => {
      await recordDelivery(job.id, job.attempts);
    },
    block: async (job, { signal }) => {
      await recordDelivery(job.id, job.attempts);
      const outcome = await new Promise<'ok' | 'permanent'>((resolve, reject) => {
        finishers.set(job.id, resolve);
        if (job.payload.cooperative) {
          signal.addEventListener('abort', () => reject(signal.reason), { once: true });
        }
        send({ type: 'started', id: job.id, attempts: job.attempts });
      });
      finishers.delete(job.id);
      send({ type: 'finishing', id: job.id, attempts: job.attempts });
      if (outcome === 'permanent') throw new PermanentError(`late failure from ${process.pid}`);
    },
    poison: () => {
      process.kill(process.pid, 'SIGKILL');
    },
    ...Object.fromEntries((config.sleepKinds ?? []).map((kind) => [kind, sleeper])),
    txn_effect: {
      transactional: true,
      handle: async (job, { client }: TransactionalHandlerContext) => {
        await client.query(`INSERT INTO ${txnEffectsTable} (job_id, attempt, pid) VALUES ($1, $2, $3)`, [
          job.id,
          job.attempts,
          process.pid,
        ]);
        // Widen the window between the insert and COMMIT, where a SIGKILL must leave nothing behind.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 4));
      },
    },
  },
});

worker.on(LISTEN, () => send({ type: 'listen' }));
worker.on('job:start', (job) => send({ type: 'job:start', id: job.id, attempts: job.attempts }));
worker.on('job:success', (job) => send({ type: 'job:success', id: job.id, attempts: job.attempts }));
worker.on('job:failure', (job, _error, outcome) =>
  send({ type: 'job:failure', id: job.id, attempts: job.attempts, status: outcome.status }),
);
worker.on('job:stale', (job) => send({ type: 'job:stale', id: job.id, attempts: job.attempts }));
worker.on('job:released', (job) => send({ type: 'job:released', id: job.id, attempts: job.attempts }));
worker.on('job:cancelled', (job) => send({ type: 'job:cancelled', id: job.id, attempts: job.attempts }));
worker.on('lease:lost', (job) => send({ type: 'lease:lost', id: job.id, attempts: job.attempts }));
worker.on(SWEEP, (result) => send({ type: 'sweep', requeued: result.requeued, dead: result.dead }));
worker.on('error', (error, source) =>
  send({ type: 'error', source, code: error.code, message: error.message }),
);
worker.on(STOP, () => send({ type: 'stop' }));
worker.on(WARNING, (message) => send({ type: 'warning', message }));

await worker.start();
send({ type: 'ready', workerId: worker.id, pid: process.pid });
