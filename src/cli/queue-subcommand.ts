/**
 * What every `skiplock queues` subcommand that acts on one queue (`pause`,
 * `resume`, `limits`) has: the NAME argument, and the connection and --json
 * flags of `queues`, which commander hands to the parent wherever they stand.
 */
import type { Command } from 'commander';
import type { Skiplock } from '../skiplock.js';
import { withDatabase } from './database.js';
import { type DatabaseCommandFlags, examples, name } from './flags.js';

/**
 * Makes `command` act on the queue NAME: adds the argument, then after its help
 * `exampleLines` (none: no examples) and where the connection flags go; its
 * action runs `act` with the queue's name, the flags (its own and those given
 * to `queues`, the connection flags and `--json`, typed `F`) and a Skiplock on the database they name, closed
 * when `act` settles.
 *
 * @returns `command`.
 */
export function actOnQueue<F extends DatabaseCommandFlags>(
  command: Command,
  exampleLines: readonly string[],
  act: (queue: string, flags: F, skiplock: Skiplock) => Promise<void>,
): Command {
  const help = exampleLines.length > 0 ? examples(...exampleLines) : '';
  return command
    .argument('NAME', 'the queue', name)
    .addHelpText(
      'after',
      `${help}\nConnection and --json: the flags of \`skiplock queues\`, given before or after NAME.`,
    )
    .action(async (queue: string) => {
      const flags = command.optsWithGlobals<F>();
      await withDatabase(flags, ({ skiplock }) => act(queue, flags, skiplock));
    });
}
