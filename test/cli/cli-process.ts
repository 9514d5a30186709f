/**
 * Runs the real `skiplock` command line as a child process, from source through
 * tsx (no build needed), and waits on its output with deadlines, never sleeps.
 * Each start costs a second or more of CPU: run many one or two at a time
 * (`runCliEach`), not all at once.
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
  /** Written to the process's standard input, which is then closed (default: no standard input). */
  input?: string;
  /** `runCli` kills the process and fails, with its output, when it has not ended after this long. */
  timeoutMs?: number;
}

/** How long `runCli` lets one command run by default: well below the tests' timeouts. */
export const CLI_TIMEOUT_MS = 45_000;

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
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (options.input !== undefined) child.stdin!.end(options.input);
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

/** What a finished CLI run printed, and how it ended. */
export interface CliResult {
  code: number | string;
  stdout: string;
  stderr: string;
}

/** Runs `skiplock ...args` to its end; kills it and fails after `options.timeoutMs`. */
export async function runCli(args: string[], options: CliOptions = {}): Promise<CliResult> {
  const run = spawnCli(args, options);
  const timeoutMs = options.timeoutMs ?? CLI_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      run.child.kill('SIGKILL');
      reject(
        new Error(
          `skiplock ${args.join(' ')} still running after ${timeoutMs} ms\nstdout: ${run.stdout()}\nstderr: ${run.stderr()}`,
        ),
      );
    }, timeoutMs);
  });
  try {
    const code = await Promise.race([run.exited, late]);
    return { code, stdout: run.stdout(), stderr: run.stderr() };
  } finally {
    clearTimeout(timer);
  }
}

/** Runs several commands, at most `parallel` at a time; results in the order given. */
export async function runCliEach(
  runs: string[][],
  options: CliOptions = {},
  parallel = 2,
): Promise<CliResult[]> {
  const results: CliResult[] = [];
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < runs.length; i = next++) results[i] = await runCli(runs[i]!, options);
  };
  await Promise.all(Array.from({ length: Math.min(parallel, runs.length) }, lane));
  return results;
}

/** The flags that point a command at a database and schema. */
export function connectionFlags(url: string, schema: string): string[] {
  return ['--database-url', url, '--schema', schema];
}

/**
 * `runCli` for one database and schema: the function returned runs
 * `skiplock ...args` with the connection flags after `args`. `target` is read
 * at each run, so a database or schema made after the call is the one used.
 */
export function cliOn(
  target: () => { url: string; schema: string },
): (...args: string[]) => Promise<CliResult> {
  return (...args) => {
    const { url, schema } = target();
    return runCli([...args, ...connectionFlags(url, schema)]);
  };
}
