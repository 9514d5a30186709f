/**
 * A demo worker process: `skiplock worker` forked with the shop's handlers.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SHOP_QUEUES } from './shop.js';

/** A forked worker process, with the tail of its output for error reports. */
export interface WorkerProcess {
  workerId: string;
  child: ChildProcess;
  /** Resolves with the exit code (or the signal name) when the process ends. */
  exited: Promise<number | string>;
  /** Resolves when the worker has started (it reports over IPC); rejects if it exits first. */
  started: Promise<void>;
  /** Last lines it printed. */
  output(): string;
}

/** Options of the forked `skiplock worker`. */
export interface WorkerProcessOptions {
  workerId: string;
  url: string;
  schema: string;
  concurrency: number;
  visibilityTimeoutMs: number;
}

// The CLI and the handlers file sit beside this file, as .ts under tsx or .js when built.
const ext = extname(fileURLToPath(import.meta.url));
const MAIN = fileURLToPath(new URL(`../main${ext}`, import.meta.url));
const HANDLERS = fileURLToPath(new URL(`./shop-handlers${ext}`, import.meta.url));

/** Forks `skiplock worker` on the demo schema; the URL goes in the environment, not the command line. */
export function forkWorker(options: WorkerProcessOptions): WorkerProcess {
  const args = [
    'worker',
    '--handlers',
    HANDLERS,
    ...SHOP_QUEUES.flatMap((q) => ['--queue', q]),
    '--schema',
    options.schema,
    '--concurrency',
    String(options.concurrency),
    '--visibility-timeout-ms',
    String(options.visibilityTimeoutMs),
    '--sweep-interval-ms',
    '500',
    '--poll-interval-ms',
    '1000',
    '--shutdown-timeout-ms',
    '5000',
    '--on-success',
    'keep',
    '--worker-id',
    options.workerId,
    '--log-level',
    'error',
  ];
  const child = fork(MAIN, args, {
    env: {
      ...process.env,
      DATABASE_URL: options.url,
      SKIPLOCK_DEMO_SCHEMA: options.schema,
      SKIPLOCK_DEMO_CONCURRENCY: String(options.concurrency),
    },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const lines: string[] = [];
  const keep = (chunk: Buffer) => {
    lines.push(...chunk.toString().split('\n').filter(Boolean));
    lines.splice(0, Math.max(0, lines.length - 20));
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  });
  const started = new Promise<void>((resolve, reject) => {
    child.on('message', (message: { event?: string }) => {
      if (message?.event === 'worker:started') resolve();
    });
    void exited.then((code) =>
      reject(new Error(`worker process ${options.workerId} exited with ${code}:\n${lines.join('\n')}`)),
    );
  });
  started.catch(() => {});
  return { workerId: options.workerId, child, exited, started, output: () => lines.join('\n') };
}
