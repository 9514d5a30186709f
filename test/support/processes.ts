/** Helpers to run skiplock in child processes for tests. */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/** Forks `script` (a TypeScript file next to this one) through tsx, with `env` added. */
export function forkScript(script: string, env: Record<string, string>): ChildProcess {
  return fork(fileURLToPath(new URL(script, import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

/** Who runs cleanups after the test: the fixture's `defer`. */
export interface ProcessOwner {
  defer(cleanup: () => unknown): void;
}

/** Has `owner` SIGKILL `child` after the test, whatever happened, and wait until it exited; returns `child`. */
export function killedAfterTest(owner: ProcessOwner, child: ChildProcess): ChildProcess {
  owner.defer(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited(child);
    }
  });
  return child;
}

/** Resolves once `child` sends `message`; rejects if it exits first. */
export async function sent(child: ChildProcess, message: string): Promise<void> {
  const exit = once(child, 'exit').then(([code, signal]) => {
    throw new Error(`process ${child.pid} exited (${String(code ?? signal)}) before sending '${message}'`);
  });
  exit.catch(() => {});
  const received = new Promise<void>((resolve) => {
    const listener = (m: unknown) => {
      if (m !== message) return;
      child.off('message', listener);
      resolve();
    };
    child.on('message', listener);
  });
  await Promise.race([received, exit]);
}

/** Starts a worker process (worker-process.ts) and resolves once it reports `ready`. */
export async function startWorkerProcess(env: Record<string, string>): Promise<ChildProcess> {
  const child = forkScript('./worker-process.ts', env);
  await sent(child, 'ready');
  return child;
}

/** Resolves with the exit code (or signal) of a child. */
export async function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null) return child.exitCode;
  if (child.signalCode !== null) return child.signalCode;
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  return code ?? signal ?? -1;
}
