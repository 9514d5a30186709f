/** Helpers to run skiplock in child processes for tests. */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const WORKER_SCRIPT = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

/** Starts a worker process and resolves once it reports `ready`. */
export async function startWorkerProcess(env: Record<string, string>): Promise<ChildProcess> {
  const child = fork(WORKER_SCRIPT, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await Promise.race([once(child, 'message'), once(child, 'exit')])) as unknown[];
  if (message !== 'ready') throw new Error(`worker process exited before ready (code ${String(message)})`);
  return child;
}

/** Resolves with the exit code (or signal) of a child. */
export async function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null) return child.exitCode;
  if (child.signalCode !== null) return child.signalCode;
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  return code ?? signal ?? -1;
}
