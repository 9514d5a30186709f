/**
 * `skiplock queues [pause|resume|limits NAME]`: lists queues with their state
 * and limits, or pauses, resumes or limits one.
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type DatabaseCommandFlags } from '../flags.js';
import { printJson, printText } from '../output.js';
import { actOnQueue } from '../queue-subcommand.js';
import { renderTable } from '../table.js';
import { formatLimits, queueLimitsCommand } from './queue-limits.js';

/** The `queues` command and its `pause`, `resume` and `limits` subcommands. */
export function queuesCommand(): Command {
  const command = new Command('queues')
    .summary('list queues; pause, resume or limit one')
    .description(
      'Lists every queue with jobs or settings: paused or not, its limits, queued and running jobs. A paused queue is skipped by every worker until it is resumed (it stays paused across restarts).',
    );
  addDatabaseCommandFlags(command, [
    'skiplock queues',
    'skiplock queues pause emails',
    'skiplock queues resume emails',
    'skiplock queues limits emails --concurrency 5 --rate 100/1m',
  ]).action(async (flags: DatabaseCommandFlags) => {
    await withDatabase(flags, async ({ skiplock }) => {
      const queues = await skiplock.queues();
      if (flags.json) printJson(queues);
      else if (queues.length === 0) printText('no queues');
      else
        printText(
          renderTable(
            ['queue', 'state', 'queued', 'running', 'limits', 'paused at'],
            queues.map((q) => [
              q.name,
              q.paused ? 'paused' : 'running',
              q.queued,
              q.running,
              formatLimits(q.limits),
              q.pausedAt?.toISOString() ?? null,
            ]),
          ),
        );
    });
  });
  for (const action of ['pause', 'resume'] as const) {
    const sub = new Command(action).summary(
      action === 'pause' ? 'stop workers claiming from a queue' : 'let workers claim from a queue again',
    );
    actOnQueue<DatabaseCommandFlags>(sub, [], async (name, flags, skiplock) => {
      const changed = action === 'pause' ? await skiplock.pauseQueue(name) : await skiplock.resumeQueue(name);
      if (flags.json) printJson({ queue: name, paused: action === 'pause', changed });
      else if (action === 'pause') printText(changed ? `paused ${name}` : `${name} was paused already`);
      else printText(changed ? `resumed ${name}` : `${name} was not paused`);
    });
    command.addCommand(sub);
  }
  command.addCommand(queueLimitsCommand());
  return command;
}
