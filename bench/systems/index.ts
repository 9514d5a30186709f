/** The job systems the benchmark can run, by name. */
import { bareLoopSystem } from './bare-loop.js';
import { bullmqSystem } from './bullmq.js';
import { graphileWorkerSystem } from './graphile-worker.js';
import { pgBossSystem } from './pg-boss.js';
import { skiplockSystem } from './skiplock.js';
import type { BenchSystem } from './system.js';

/** Every job system, skiplock first (the report's ratios are skiplock / peer). */
export const SYSTEMS: readonly BenchSystem[] = [
  skiplockSystem,
  graphileWorkerSystem,
  pgBossSystem,
  bullmqSystem,
];

/** The system of a name (also the drain scenario's bare loop). @throws {Error} for an unknown name. */
export function systemByName(name: string): BenchSystem {
  const system = [...SYSTEMS, bareLoopSystem].find((s) => s.name === name);
  if (!system) throw new Error(`unknown system ${name}; known: ${SYSTEMS.map((s) => s.name).join(', ')}`);
  return system;
}
