/** What every scenario gets and gives back. */
import type { Measurement } from '../report.js';
import type { BenchSystem, SystemClient, Target } from '../systems/system.js';

/** The run's settings, shared by every scenario. */
export interface BenchContext {
  /** URL of the server's maintenance database; scenarios make their own databases on it. */
  serverUrl: string;
  /** Fewer and shorter runs. */
  quick: boolean;
  /**
   * Tiny sizes that only prove a scenario runs end to end (`BENCH_SMOKE=1`,
   * implies `quick`); its figures mean nothing.
   */
  smoke: boolean;
  /** Runs per figure (≥ 3). */
  runs: number;
  /** The job systems to compare (skiplock first). */
  systems: readonly BenchSystem[];
  /** Progress output. */
  log(line: string): void;
  /** Adds one sample to a figure. */
  record(m: Omit<Measurement, 'samples'>, value: number): void;
  /** A free-text note for the report (diagnostics, settings, anomalies). */
  note(text: string): void;
}

/** One numbered scenario. */
export interface Scenario {
  id: number;
  title: string;
  run(ctx: BenchContext): Promise<void>;
}

let sequence = 0;

/** A database/queue name unique to this run, made of `[a-z0-9_]`. */
export function namespaceFor(system: string, scenario: string): string {
  sequence++;
  return `skbench_${scenario}_${system.replace(/[^a-z0-9]/g, '')}_${process.pid}_${sequence}`;
}

/** A fresh target with a client attached; `close()` ends the client and removes the target. */
export interface OpenTarget {
  client: SystemClient;
  target: Target;
  close(): Promise<void>;
}

/** Makes a fresh target for `system` and attaches a client to it. */
export async function openTarget(
  ctx: BenchContext,
  system: BenchSystem,
  scenario: string,
): Promise<OpenTarget> {
  const target = await system.create(ctx.serverUrl, namespaceFor(system.name, scenario));
  let client: SystemClient;
  try {
    client = await system.attach(target);
  } catch (error) {
    await system.destroy(target);
    throw error;
  }
  return {
    client,
    target,
    async close() {
      try {
        await client.close();
      } finally {
        await system.destroy(target);
      }
    },
  };
}

/**
 * Makes a fresh target for `system`, runs `fn` with a client attached to it,
 * and always removes the target afterwards.
 */
export async function withTarget<T>(
  ctx: BenchContext,
  system: BenchSystem,
  scenario: string,
  fn: (client: SystemClient, target: Target) => Promise<T>,
): Promise<T> {
  const open = await openTarget(ctx, system, scenario);
  try {
    return await fn(open.client, open.target);
  } finally {
    await open.close();
  }
}

/** Payloads `{ i }` for i in [from, from + count). */
export function payloads(count: number, from = 0): { i: number }[] {
  return Array.from({ length: count }, (_, k) => ({ i: from + k }));
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` every `intervalMs` until it is true; false after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  intervalMs = 5,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await sleep(intervalMs);
  }
  return check();
}
