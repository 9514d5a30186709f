/**
 * `--retention-succeeded`, `--retention-failed`, `--retention-dead`,
 * `--retention-cancelled` and `--retention-archive`: an age in milliseconds
 * per finished status and for the archive, as the library's `retention`
 * option. Shared by `worker` and `prune`.
 */
import type { Command } from 'commander';
import { MAX_RETENTION_MS } from '../db/queries/prune.js';
import type { Retention } from '../maintenance/pruner.js';
import { integer } from './flags.js';

/** The per-status retention flags as parsed (commander's camelCase names). */
export interface RetentionFlags {
  retentionSucceeded?: number;
  retentionFailed?: number;
  retentionDead?: number;
  retentionCancelled?: number;
  retentionArchive?: number;
}

/** Each flag: the {@link Retention} key it sets, its parsed name, and what it prunes. */
const RETENTION_FLAGS: readonly { key: keyof Retention; name: keyof RetentionFlags; prunes: string }[] = [
  { key: 'succeeded', name: 'retentionSucceeded', prunes: 'succeeded jobs kept in the table' },
  { key: 'failed', name: 'retentionFailed', prunes: 'failed jobs' },
  { key: 'dead', name: 'retentionDead', prunes: 'dead letters' },
  { key: 'cancelled', name: 'retentionCancelled', prunes: 'cancelled jobs' },
  {
    key: 'archive',
    name: 'retentionArchive',
    prunes: 'archived jobs (whole UTC days are dropped as partitions)',
  },
];

/**
 * Adds the five `--retention-<status> <ms>` flags to `command`: integers from
 * 0 to 100 years of milliseconds; anything else is a usage error naming the
 * flag (exit 2).
 */
export function addRetentionFlags(command: Command): Command {
  for (const { key, prunes } of RETENTION_FLAGS) {
    command.option(
      `--retention-${key} <ms>`,
      `prune ${prunes} finished longer ago than this`,
      integer(0, MAX_RETENTION_MS),
    );
  }
  return command;
}

/** The ages given by the per-status flags, or undefined when none was given. */
export function retentionFromFlags(flags: RetentionFlags): Retention | undefined {
  const retention: Retention = {};
  for (const { key, name } of RETENTION_FLAGS) {
    const age = flags[name];
    if (age !== undefined) retention[key] = age;
  }
  return Object.keys(retention).length === 0 ? undefined : retention;
}
