/**
 * Runs the real `skiplock` command line as a child process, from source through
 * tsx (no build needed), and waits on its output with deadlines, never sleeps.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
// An absolute loader URL, so the CLI runs from any working directory (tests use temp folders).
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/** Options of a CLI run. */
export interface CliOptions {
  cwd?: string;
  /** Added to the environment; a key set to undefined is removed. DATABASE_URL is never inherited. */
  env?: Record<string, string | undefined>;
}

/** A running CLI process. */
export interface CliProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (a signal name when killed by one). */
  exited: Promise<number | string>;
  /** Resolves when stdout or stderr matches `pattern`; rejects after `timeoutMs` or if the process ends first. */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<void>;
}

/** Starts `skiplock ...args`. */
export function spawnCli(args: string[], options: CliOptions = {}): CliProcess {
  const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: undefined, ...options.env };
  for (const key of Object.keys(env)) if (env[key] === undefined) delete env[key];
  const child = spawn(process.execPath, ['--import', TSX, MAIN, ...args], {
    cwd: options.cwd ?? process.cwd(),
    env: env as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (const l of listeners) l();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    for (const l of listeners) l();
  });
  const exited = new Promise<number | string>((resolve) => {
    child.on('close', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  });
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    waitForOutput: (pattern, timeoutMs = 30_000) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (pattern.test(stdout) || pattern.test(stderr)) done(resolve);
        };
        const timer = setTimeout(
          () =>
            done(() =>
              reject(new Error(`timed out waiting for ${pattern}\nstdout: ${stdout}\nstderr: ${stderr}`)),
            ),
          timeoutMs,
        );
        const done = (settle: () => void) => {
          clearTimeout(timer);
          listeners.delete(check);
          settle();
        };
        listeners.add(check);
        void exited.then((code) =>
          done(() =>
            reject(new Error(`exited with ${code} before ${pattern}\nstdout: ${stdout}\nstderr: ${stderr}`)),
          ),
        );
        check();
      }),
  };
}

/** Runs `skiplock ...args` to its end. */
export async function runCli(
  args: string[],
  options: CliOptions = {},
): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const run = spawnCli(args, options);
  const code = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}
