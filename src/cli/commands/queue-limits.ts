/**
 * `skiplock queues limits NAME [--concurrency N|none] [--rate COUNT/PERIOD|none]
 * [--group-concurrency N|none] [--group-rate COUNT/PERIOD|none] [--strict-order|--no-strict-order]`:
 * sets or removes a queue's global and per-group-key limits, or shows them
 * when no flag is given.
 */
import { Command, InvalidArgumentError } from 'commander';
import { definedOnly } from '../../options.js';
import type { QueueLimits, QueueLimitsOptions, RateLimit } from '../../skiplock.js';
import { type DatabaseCommandFlags, integer } from '../flags.js';
import { printJson, printText } from '../output.js';
import { actOnQueue } from '../queue-subcommand.js';

// `none` stays a string through commander, which turns a parser's null into ''.
type Flags = DatabaseCommandFlags & {
  concurrency?: number | 'none';
  rate?: RateLimit | 'none';
  groupConcurrency?: number | 'none';
  groupRate?: RateLimit | 'none';
  strictOrder?: boolean;
};

/** A limit flag's value for `setQueueLimits`: `none` removes the limit (null); a flag not given stays undefined. */
function noneAsNull<T>(value: T | 'none' | undefined): T | null | undefined {
  return value === 'none' ? null : value;
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Parses `--concurrency`: an integer ≥ 1, or `none` to remove the limit. */
function concurrencyFlag(value: string): number | 'none' {
  if (value === 'none') return value;
  return integer(1, 2_147_483_647)(value);
}

/**
 * Parses `--rate COUNT/PERIOD`: PERIOD is milliseconds, or a number with a unit
 * `ms`, `s`, `m` or `h` (`50/1s`, `1000/1m`); `none` removes the limit.
 */
export function rateFlag(value: string): RateLimit | 'none' {
  if (value === 'none') return value;
  const match = /^(\d+)\/(\d+)(ms|s|m|h)?$/.exec(value.trim());
  if (!match)
    throw new InvalidArgumentError('must be COUNT/PERIOD, such as 50/1s, 100/500ms or 1000/1m, or none.');
  return { count: Number(match[1]), periodMs: Number(match[2]) * UNIT_MS[match[3] ?? 'ms']! };
}

/** A queue's limits as one line: `concurrency 3, rate 50/1000ms`, or `none`. */
export function formatLimits(limits: QueueLimits): string {
  const parts: string[] = [];
  if (limits.concurrency !== null) parts.push(`concurrency ${limits.concurrency}`);
  if (limits.rate !== null) parts.push(`rate ${limits.rate.count}/${limits.rate.periodMs}ms`);
  if (limits.groupConcurrency !== null) parts.push(`group concurrency ${limits.groupConcurrency}`);
  if (limits.groupRate !== null)
    parts.push(`group rate ${limits.groupRate.count}/${limits.groupRate.periodMs}ms`);
  if (limits.strictOrder) parts.push('strict order');
  return parts.length === 0 ? 'none' : parts.join(', ');
}

/** The `queues limits` subcommand. */
export function queueLimitsCommand(): Command {
  const sub = new Command('limits')
    .summary("set or remove a queue's global concurrency and rate limits")
    .description(
      'Caps a queue across all workers and hosts: --concurrency N jobs running at once, --rate COUNT/PERIOD job starts within any PERIOD. `none` removes a limit; a flag not given leaves its limit as it is; with no flag, shows the limits.',
    )
    .option('--concurrency <n|none>', 'most jobs of the queue running at once', concurrencyFlag)
    .option(
      '--rate <count/period|none>',
      'most job starts per period: 50/1s, 100/500ms, 1000/1m, 10/1h',
      rateFlag,
    )
    .option('--group-concurrency <n|none>', 'most jobs of one group key running at once', concurrencyFlag)
    .option('--group-rate <count/period|none>', 'most job starts of one group key per period', rateFlag)
    .option('--strict-order', "start a group key's jobs in order; a retry holds the ones behind it")
    .option('--no-strict-order', "start a group key's jobs in any order (the default)");
  return actOnQueue<Flags>(
    sub,
    [
      'skiplock queues limits emails --concurrency 5',
      'skiplock queues limits emails --rate 100/1m',
      'skiplock queues limits emails --concurrency none --rate none',
      'skiplock queues limits ledger --group-concurrency 1 --strict-order',
      'skiplock queues limits api --group-rate 10/1s',
      'skiplock queues limits emails',
    ],
    async (name, flags, skiplock) => {
      const change: QueueLimitsOptions = definedOnly({
        concurrency: noneAsNull(flags.concurrency),
        rate: noneAsNull(flags.rate),
        groupConcurrency: noneAsNull(flags.groupConcurrency),
        groupRate: noneAsNull(flags.groupRate),
        strictOrder: flags.strictOrder,
      });
      const changing = Object.keys(change).length > 0;
      const limits = changing
        ? await skiplock.setQueueLimits(name, change)
        : ((await skiplock.queues()).find((q) => q.name === name)?.limits ?? {
            concurrency: null,
            rate: null,
            groupConcurrency: null,
            groupRate: null,
            strictOrder: false,
          });
      if (flags.json) printJson({ queue: name, limits });
      else printText(`${name}: limits ${formatLimits(limits)}`);
    },
  );
}
