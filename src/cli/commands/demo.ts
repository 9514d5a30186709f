/**
 * `skiplock demo`: a small shop on the embedded PostgreSQL (or any database):
 * orders and their jobs committed together, several worker processes, retries,
 * dead letters, a worker killed midway, rolled-back orders — then a summary
 * and a proof checked by SQL. Exit 0 only when the proof holds.
 */

import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command } from 'commander';
import pg from 'pg';
import { DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS } from '../../config.js';
import { quoteIdent } from '../../db/sql.js';
import { Skiplock } from '../../skiplock.js';
import { resolveDatabaseUrl } from '../database.js';
import { DemoProgress, type QueueProgress } from '../demo/progress.js';
import { type DemoSummary, summarize } from '../demo/report.js';
import { createShopTables, placeOrder, planOrders, SHOP_QUEUES, type ShopJobs } from '../demo/shop.js';
import { forkWorker, type WorkerProcess } from '../demo/worker-process.js';
import { type ConnectionFlags, examples, integer } from '../flags.js';
import { printJson, printText } from '../output.js';
import { formatDuration } from '../table.js';

interface DemoFlags extends Omit<ConnectionFlags, 'schema'> {
  orders: number;
  workers: number;
  concurrency: number;
  seed: number;
  rate: number;
  visibilityTimeoutMs: number;
  timeoutMs: number;
  kill: boolean;
  keep?: boolean;
  json?: boolean;
  progress: boolean;
}

/** The `demo` command. */
export function demoCommand(): Command {
  return new Command('demo')
    .summary('run a small shop on skiplock and prove nothing was lost or done twice')
    .description(
      'Plays a small shop: orders are inserted, each in ONE transaction with its jobs (send_invoice_email, sync_inventory on queue critical; resize_image on queue bulk), some scheduled for later; some orders roll back. Several `skiplock worker` processes handle the jobs with realistic latencies; some jobs fail once and are retried with backoff, a few fail permanently or run out of attempts (dead letter). Midway one worker process is killed with SIGKILL: its jobs come back after the (short) visibility timeout. Effects are written idempotently. At the end: a summary, and a proof by SQL that every committed order got its effects exactly once and every rolled-back one none. Each run uses a fresh schema (dropped afterwards unless --keep). Exit code 0 only when the proof holds.',
    )
    .option('--orders <n>', 'orders to place', integer(1, 100_000), 300)
    .option('--workers <n>', 'worker processes', integer(1, 32), 3)
    .option('--concurrency <n>', 'handlers at once per worker process', integer(1, 1000), 16)
    .option(
      '--seed <n>',
      'seed of the shop (same seed, same orders and faults)',
      integer(0, 2_147_483_647),
      1,
    )
    .option('--rate <n>', 'orders placed per second', integer(1, 100_000), 50)
    .option(
      '--visibility-timeout-ms <ms>',
      'visibility timeout of the demo workers (short, so the killed worker’s jobs come back fast)',
      integer(100, 600_000),
      3000,
    )
    .option(
      '--timeout-ms <ms>',
      'give up (exit 1) when the jobs are not done after this long',
      integer(1000, 3_600_000),
      120_000,
    )
    .option('--no-kill', 'do not kill a worker process midway')
    .option('--no-progress', 'no progress bars')
    .option('--keep', 'keep the demo schema for inspection (default: dropped at the end)')
    .option('--json', 'print the summary as JSON')
    .option(
      '--database-url <url>',
      'PostgreSQL URL (default: $DATABASE_URL, else the embedded server under ./.skiplock)',
    )
    .addHelpText(
      'after',
      examples(
        'skiplock demo',
        'skiplock demo --orders 1000 --workers 4 --seed 7',
        'skiplock demo --json --keep',
      ),
    )
    .action(async (flags: DemoFlags) => {
      const summary = await runDemo(flags);
      if (flags.json) printJson(summary);
      else printText(summaryText(summary));
      process.exitCode = summary.proof.holds ? 0 : 1;
    });
}

async function runDemo(flags: DemoFlags): Promise<DemoSummary> {
  // Ctrl-C (also during start-up): clean up (workers, schema, embedded server) instead of dying with them running.
  let interrupted: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    interrupted = signal;
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const { url, embedded } = await resolveDatabaseUrl(flags);
  const schema = `skiplock_demo_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  // The same deadlines as the pool a Skiplock makes: a server that never answers ends the demo.
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    application_name: 'skiplock-demo',
    connectionTimeoutMillis: DEFAULT_CONNECT_TIMEOUT_MS,
    query_timeout: DEFAULT_STATEMENT_TIMEOUT_MS,
    keepAlive: true,
  });
  pool.on('error', () => {});
  const skiplock = new Skiplock<ShopJobs>({ pool, schema });
  const mode = flags.json || !flags.progress ? 'off' : process.stderr.isTTY ? 'bars' : 'lines';
  const progress = new DemoProgress(mode, flags.orders, SHOP_QUEUES);
  const workers: WorkerProcess[] = [];
  try {
    await skiplock.migrate();
    await createShopTables(pool, schema);
    progress.say(
      `${flags.orders} orders at ${flags.rate}/s, ${flags.workers} worker processes × ${flags.concurrency} handlers, seed ${flags.seed}, schema ${schema}`,
    );
    progress.say(
      `visibility timeout ${flags.visibilityTimeoutMs} ms (5 min by default; short here so a killed worker's jobs come back fast)`,
    );
    const workerOptions = {
      url,
      schema,
      concurrency: flags.concurrency,
      visibilityTimeoutMs: flags.visibilityTimeoutMs,
    };
    for (let i = 1; i <= flags.workers; i++)
      workers.push(forkWorker({ ...workerOptions, workerId: `demo-worker-${i}` }));
    await Promise.all(workers.map((w) => w.started));
    progress.say(`${flags.workers} worker processes started; placing orders`);

    const plan = planOrders(flags.orders, flags.seed);
    const produced = { placed: 0, rolledBackIds: [] as string[] };
    const producing = produce(pool, skiplock, schema, plan, flags.rate, produced);
    let producerDone = false;
    let producerError: unknown;
    producing.then(
      () => {
        producerDone = true;
      },
      (error: unknown) => {
        producerError = error;
      },
    );

    let killed: DemoSummary['workers']['killed'] = null;
    const deadline = Date.now() + flags.timeoutMs;
    for (;;) {
      if (producerError) throw producerError;
      if (interrupted) throw new Error(`interrupted by ${interrupted}; the demo schema is dropped`);
      const queues = await queueProgress(pool, schema);
      progress.update(produced.placed, queues);
      const unfinished = [...queues.values()].reduce((n, q) => n + q.committed - q.finished, 0);
      if (producerDone && unfinished === 0) break;
      if (Date.now() > deadline) {
        progress.say(`gave up after ${formatDuration(flags.timeoutMs)} with ${unfinished} jobs unfinished`);
        break;
      }
      if (flags.kill && !killed && produced.placed >= flags.orders * 0.4) {
        killed = await killOneWorker(pool, schema, workers, workerOptions, progress);
      }
      for (const w of workers) {
        if (w.child.exitCode !== null && w.child.exitCode !== 0) {
          throw new Error(`worker process ${w.workerId} exited with ${w.child.exitCode}:\n${w.output()}`);
        }
      }
      await sleep(killed || !flags.kill ? 100 : 20);
    }
    progress.stop();
    await stopWorkers(workers);
    return await summarize(pool, {
      schema,
      seed: flags.seed,
      placed: produced.placed,
      rolledBackIds: produced.rolledBackIds,
      processes: flags.workers,
      concurrency: flags.concurrency,
      killed,
      visibilityTimeoutMs: flags.visibilityTimeoutMs,
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    progress.stop();
    for (const w of workers)
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    if (!flags.keep) await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).catch(() => {});
    await skiplock.close();
    await pool.end();
    await embedded?.release();
  }
}

/** Places the planned orders at `rate` per second, four at a time. */
async function produce(
  pool: pg.Pool,
  skiplock: Skiplock<ShopJobs>,
  schema: string,
  plan: ReturnType<typeof planOrders>,
  rate: number,
  produced: { placed: number; rolledBackIds: string[] },
): Promise<void> {
  const startedAt = Date.now();
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < plan.length; i = next++) {
      const dueAt = startedAt + (i * 1000) / rate;
      if (dueAt > Date.now()) await sleep(dueAt - Date.now());
      const order = plan[i]!;
      const id = await placeOrder(pool, skiplock, schema, order);
      if (order.rollBack) produced.rolledBackIds.push(id);
      produced.placed++;
    }
  };
  await Promise.all([lane(), lane(), lane(), lane()]);
}

async function queueProgress(pool: pg.Pool, schema: string): Promise<Map<string, QueueProgress>> {
  const { rows } = await pool.query<{ queue: string } & QueueProgress>(
    `SELECT queue,
            count(*)::int AS committed,
            count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'dead'))::int AS finished,
            count(*) FILTER (WHERE status = 'running')::int AS running,
            count(*) FILTER (WHERE status = 'queued' AND attempts > 0)::int AS retrying,
            count(*) FILTER (WHERE status IN ('failed', 'dead'))::int AS "failedOrDead"
     FROM ${quoteIdent(schema)}.jobs GROUP BY queue`,
  );
  return new Map(
    rows
      .sort((a, b) => SHOP_QUEUES.indexOf(a.queue as never) - SHOP_QUEUES.indexOf(b.queue as never))
      .map((r) => [r.queue, r]),
  );
}

/**
 * Kills the first worker process with SIGKILL once it holds running jobs, and
 * forks a replacement (as an orchestrator would). Its jobs stay `running` until
 * the sweeper finds their lease older than the visibility timeout.
 */
async function killOneWorker(
  pool: pg.Pool,
  schema: string,
  workers: WorkerProcess[],
  options: Omit<Parameters<typeof forkWorker>[0], 'workerId'>,
  progress: DemoProgress,
): Promise<DemoSummary['workers']['killed']> {
  const victim = workers[0]!;
  const running = async () =>
    (
      await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${quoteIdent(schema)}.jobs WHERE status = 'running' AND locked_by = $1`,
        [victim.workerId],
      )
    ).rows[0]!.n;
  if ((await running()) === 0) return null;
  victim.child.kill('SIGKILL');
  await victim.exited;
  const orphaned = await running();
  progress.say(
    `killed ${victim.workerId} with SIGKILL while it ran ${orphaned} jobs; they come back after the ${options.visibilityTimeoutMs} ms visibility timeout`,
  );
  workers.push(forkWorker({ ...options, workerId: `demo-worker-${workers.length + 1}` }));
  return { workerId: victim.workerId, runningJobs: orphaned };
}

/** Stops the live workers with SIGTERM (graceful) and waits for them. */
/** How long the demo waits for a worker process to stop after SIGTERM before it kills it. */
const WORKER_STOP_WAIT_MS = 30_000;

async function stopWorkers(workers: WorkerProcess[]): Promise<void> {
  const live = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
  // A replacement forked late may still be loading: before it has started, SIGTERM would kill
  // it outright instead of stopping it gracefully.
  await Promise.all(live.map((w) => w.started.catch(() => {})));
  for (const w of live) w.child.kill('SIGTERM');
  // A worker that does not stop in time is killed: the demo always ends.
  const codes = await Promise.all(
    live.map(async (w) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), WORKER_STOP_WAIT_MS);
      });
      const code = await Promise.race([w.exited, late]);
      clearTimeout(timer);
      if (code !== 'late') return code;
      w.child.kill('SIGKILL');
      await w.exited;
      return `no exit within ${WORKER_STOP_WAIT_MS / 1000} s of SIGTERM (killed)`;
    }),
  );
  codes.forEach((code, i) => {
    if (code !== 0)
      throw new Error(`worker process ${live[i]!.workerId} exited with ${code}:\n${live[i]!.output()}`);
  });
}

function summaryText(s: DemoSummary): string {
  const mark = (ok: boolean) => (ok ? '✔' : '✘');
  const lines = [
    '',
    `skiplock demo — seed ${s.seed}, schema ${s.schema}`,
    `  orders     ${s.orders.placed} placed: ${s.orders.committed} committed with their jobs, ${s.orders.rolledBack} rolled back (payment declined)`,
    `  jobs       ${s.jobs.committed} committed (${Object.entries(s.jobs.byQueue)
      .map(([q, n]) => `${q} ${n}`)
      .join(
        ', ',
      )}): ${s.jobs.succeeded} succeeded, ${s.jobs.failed} failed (permanent error), ${s.jobs.dead} dead (out of attempts)`,
    `  retries    ${s.jobs.retried} jobs ran more than once; ${s.jobs.attempts} attempts in all`,
    s.workers.killed
      ? `  crash      ${s.workers.killed.workerId} killed with SIGKILL holding ${s.workers.killed.runningJobs} running jobs; the sweeper gave them back after the ${s.workers.visibilityTimeoutMs} ms visibility timeout`
      : '  crash      no worker was killed',
    `  duplicates ${s.jobs.duplicateDeliveries} repeated deliveries found their effect already applied (idempotent handlers)`,
    `  throughput ${s.throughputPerSecond} jobs/s: ${s.jobs.succeeded + s.jobs.failed + s.jobs.dead} jobs finished in ${formatDuration(s.elapsedMs)} from the first enqueue, retry backoffs included (${s.workers.processes} processes × ${s.workers.concurrency} handlers)`,
    `  latency    enqueue→start p50 ${s.latencyMs.p50} ms · p95 ${s.latencyMs.p95} ms · p99 ${s.latencyMs.p99} ms (database clock, first attempts, from run_at for scheduled jobs)`,
    '',
    `proof (SQL on ${s.schema}): ${s.proof.holds ? 'HOLDS' : 'FAILED'}`,
    ...s.proof.checks.map((c) => `  ${mark(c.ok)} ${c.name}${c.ok ? '' : ` — ${c.found} found`}`),
  ];
  return lines.join('\n');
}
