/**
 * `skiplock dev`: runs the embedded PostgreSQL in the foreground, prints its
 * URL, and waits (other skiplock commands in this folder share it).
 */
import { Command } from 'commander';
import { attachEmbedded, maskUrl, stopEmbedded } from '../embedded.js';
import { examples } from '../flags.js';
import { printText } from '../output.js';
import { EmbeddedServerError } from '../postgres-programs.js';
import { UsageError } from '../usage-error.js';

interface DevFlags {
  detach?: boolean;
  stop?: boolean;
  force?: boolean;
  showPassword?: boolean;
}

/** The `dev` command. */
export function devCommand(): Command {
  return new Command('dev')
    .summary('run the embedded PostgreSQL and print its URL')
    .description(
      'Starts (or joins) the embedded PostgreSQL under ./.skiplock, prints its URL on stdout and waits until Ctrl-C; other skiplock commands in this folder use it meanwhile. The server stops when the last process using it leaves, unless --detach was used.',
    )
    .option('--detach', 'leave the server running in the background after this command exits')
    .option(
      '--stop',
      'stop the embedded server (also one left running by --detach); refused while other processes use it',
    )
    .option('--force', 'with --stop: stop it even while other processes use it')
    .option('--show-password', 'print the URL with its password (default: masked)')
    .addHelpText(
      'after',
      examples(
        'skiplock dev',
        'export DATABASE_URL=$(skiplock dev --detach --show-password)',
        'skiplock dev --stop',
        'skiplock dev --stop --force',
      ),
    )
    .action(async (flags: DevFlags) => {
      if (flags.force && !flags.stop) throw new UsageError('--force goes with --stop');
      if (flags.stop) {
        const result = await stopEmbedded(process.cwd(), flags.force ?? false);
        if (result.stopped) printText('embedded PostgreSQL stopped');
        else if (result.reason === 'not-running') printText('no embedded PostgreSQL running here');
        else
          throw new EmbeddedServerError(
            `the embedded PostgreSQL is in use by ${result.pids.length} other process${result.pids.length === 1 ? '' : 'es'} (pid ${result.pids.join(', ')}): stop them first, or add --force`,
          );
        return;
      }
      const server = await attachEmbedded({ keepRunning: flags.detach ?? false });
      process.stderr.write(
        `skiplock: embedded PostgreSQL ${server.started ? 'started' : 'already running'}, data in ${server.dir}\n`,
      );
      printText(flags.showPassword ? server.url : maskUrl(server.url));
      if (flags.detach) {
        process.stderr.write('skiplock: left running; stop it with `skiplock dev --stop`\n');
        await server.release();
        return;
      }
      process.stderr.write(
        'skiplock: press Ctrl-C to leave (the server stops if no other process uses it)\n',
      );
      // Signal listeners do not keep Node running; this timer does, until a signal comes.
      const keepAlive = setInterval(() => {}, 2 ** 30);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      clearInterval(keepAlive);
      await server.release();
    });
}
